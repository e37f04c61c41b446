"""Names the prefetch-termination protocol and its analysis give things, shared by
the passes and the rules (stdlib only: the rules load without the parser)."""

DONE = "pool_transfers_done"  # set once every extra-pool transfer of an operation ended

# What a guard forces to "no" and what its condition reads decide its shape.
COMPLETION = "completion"  # forces the completion predicate: the spec's form (D3)
VOTE_FORCING = "vote-forcing"  # forces the vote, conditioned on completion: upstream's form
VOTE_KEYED = "vote-keyed"  # forces the vote, conditioned on the vote itself
TRANSFERS_ONLY = "transfers-only"  # forces the vote on the transfer state alone
OTHER_LOCAL = "other-local"  # forces some other local

# The normalized features of a decision method (HC104 compares those not about the guard).
FEATURE_NAMES = (
    "policies",
    "guard",
    "guard-key",
    "guard-placement",
    "combine",
    "reduce-op",
    "reduce-payload",
    "timeout-cap",
)

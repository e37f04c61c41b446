"""Every real-world spelling is recognized, right and wrong, and normalizes alike."""

from __future__ import annotations

import itertools

import pytest

from pathlib import Path

from lint.api import Linter, fix_source, lint_source
from lint.config import Config, from_table
from lint.rules.base import POOLED_TAIL, fenced

FENCED = from_table(fenced("Cache"), "test", Path.cwd(), None)

PARAMS = ["operation", "op", "prefetch_op"]
VOTES = ["can_terminate", "vote", "ok_to_stop"]
PREDICATES = {
    "direct": "{P} = len({O}.hash_value) > 0 and {O}.completed_tokens == len({O}.hash_value) * self.page_size",
    "helper": "{P} = self._prefetch_completed({O})",
    "two-step": "done_tokens = {O}.completed_tokens\n{P} = done_tokens >= len({O}.hash_value) * self.page_size",
    "if-else": (
        "if len({O}.hash_value) == 0:\n    {P} = False\nelse:\n"
        "    {P} = {O}.completed_tokens == len({O}.hash_value) * self.page_size"
    ),
}
PREDICATE_NAMES = ["completed", "is_done", "kv_complete"]
GUARDS = {
    "if-getattr": (
        'if {P} and getattr({O}, "pool_transfers", None) and not getattr({O}, "pool_transfers_done", True):\n'
        "    {P} = False"
    ),
    "if-attr": "if {P} and {O}.pool_transfers and not {O}.pool_transfers_done:\n    {P} = False",
    "and-assign": "{P} = {P} and (not {O}.pool_transfers or {O}.pool_transfers_done)",
    "and-assign-getattr": '{P} = {P} and getattr({O}, "pool_transfers_done", True)',
    "iand": "{P} &= {O}.pool_transfers_done",
    "alias-done": "extras_done = {O}.pool_transfers_done\nif not extras_done:\n    {P} = False",
    "alias-pending": (
        "extras_pending = bool({O}.pool_transfers) and not {O}.pool_transfers_done\n"
        "if {P} and extras_pending:\n    {P} = False"
    ),
    "nested": "if {P} and {O}.pool_transfers:\n    if not {O}.pool_transfers_done:\n        {P} = False",
    "eq-false": "if {P} and {O}.pool_transfers_done == False:\n    {P} = False",
    "is-not-true": "if {P} and {O}.pool_transfers_done is not True:\n    {P} = False",
}
REDUCES = {
    "torch": (
        "states = torch.tensor([1 - int({V}), int(terminated)], dtype=torch.int)\n"
        "torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)\n"
        "{V} = states[0].item() == 0\nterminated = states[1].item() == 1"
    ),
    "dist": (
        "states = torch.tensor([1 - int({V}), int(terminated)])\n"
        "dist.all_reduce(states, op=dist.ReduceOp.MAX)\n"
        "{V} = states[0].item() == 0\nterminated = states[1].item() == 1"
    ),
    "reducer": (
        "vote_no, terminated = self.reducer.all_reduce_max(\n"
        '    [1 - int({V}), int(terminated)], name="prefetch_terminate"\n)\n'
        "{V} = vote_no == 0"
    ),
    "world-size": (
        "if self.world_size > 1:\n"
        "    flags = self.reducer.all_reduce_max([1 - int({V}), int(terminated)], name=\"t\")\n"
        "    {V} = flags[0] == 0\n    terminated = flags[1] == 1"
    ),
}


def indent(block: str, spaces: int) -> str:
    return "\n".join((" " * spaces + line) if line else line for line in block.split("\n"))


def method_source(param="operation", vote="can_terminate", predicate="completed", pred_form="direct",
                  guard="if-getattr", reduce="torch", guard_at="after-predicate", evidence=False) -> str:
    fill = {"O": param, "P": predicate, "V": vote}
    pred = PREDICATES[pred_form].format(**fill)
    guard_text = GUARDS[guard].format(**fill) if guard else ""
    vote_guard = GUARDS[guard].format(**{**fill, "P": vote}) if guard else ""
    lines: list[str] = [
        "import time",
        "import torch",
        "import torch.distributed as dist",
        "",
        "",
        "class Cache:",
        "    def _prefetch_completed(self, op):",
        "        return op.completed_tokens >= len(op.hash_value) * self.page_size",
        "",
    ]
    if evidence:  # another method reads the pool fields on the operation
        lines += [
            "    def _extras_pending(self, op):",
            "        return op.pool_transfers and not op.pool_transfers_done",
            "",
        ]
    lines += [
        f"    def can_terminate_prefetch(self, {param}):",
        f"        {vote} = True",
        '        if self.prefetch_stop_policy == "best_effort":',
        f"            return {vote}",
        indent(pred, 8),
    ]
    if guard_at == "after-predicate":
        lines.append(indent(guard_text, 8))
    lines += [
        '        if self.prefetch_stop_policy == "wait_complete":',
        f"            {vote} = {predicate}",
        '        elif self.prefetch_stop_policy == "timeout":',
        f"            limit = min(self.timeout_max, self.timeout_base + len({param}.hash_value))",
        f"            {vote} = {predicate} or time.monotonic() - {param}.start_time > limit",
    ]
    if guard_at == "on-vote":
        lines.append(indent(vote_guard, 8))
    lines.append(f"        terminated = {param}.is_terminated()")
    lines.append(indent(REDUCES[reduce].format(**fill), 8))
    if guard_at == "after-reduce":
        lines.append(indent(guard_text, 8))
    lines += [f"        return {vote} or terminated", ""]
    return "\n".join(lines) + POOLED_TAIL


def features(text: str) -> dict:
    linter = Linter(Config())
    analysis = linter.lint_text(text, "x.py")
    assert analysis is not None and len(analysis.methods) == 1
    return {k: f.value for k, f in analysis.methods[0].features.items()}


CANONICAL = features(method_source())


def test_canonical_features():
    assert CANONICAL == {
        "policies": "best_effort, wait_complete, timeout",
        "guard": "present",
        "guard-key": "completion predicate",
        "guard-placement": "effective",
        "combine": "vote OR any-terminated",
        "reduce-op": "MAX",
        "reduce-payload": "[1-vote, terminated]",
        "timeout-cap": "capped by a max",
    }


CASES = (
    [pytest.param({"param": p}, id=f"param-{p}") for p in PARAMS]
    + [pytest.param({"vote": v}, id=f"vote-{v}") for v in VOTES]
    + [pytest.param({"predicate": n}, id=f"predicate-{n}") for n in PREDICATE_NAMES]
    + [pytest.param({"pred_form": f}, id=f"pred-form-{f}") for f in PREDICATES]
    + [pytest.param({"guard": g}, id=f"guard-{g}") for g in GUARDS]
    + [pytest.param({"reduce": r}, id=f"reduce-{r}") for r in REDUCES]
    + [
        pytest.param(dict(zip(("param", "vote", "predicate", "guard", "reduce"), combo)),
                     id="mix-" + "-".join(combo))
        for combo in itertools.islice(
            itertools.product(PARAMS[1:], VOTES[1:], PREDICATE_NAMES[1:], ["iand", "nested", "alias-pending"],
                              ["reducer", "world-size"]),
            0, None, 7,
        )
    ]
)


@pytest.mark.parametrize("variant", CASES)
def test_correct_spelling_is_clean_and_normalizes_alike(variant):
    text = method_source(**variant)
    result = lint_source(text)
    assert result.errors == []
    assert [str(f) for f in result.findings] == []
    assert features(text) == CANONICAL


@pytest.mark.parametrize("guard", list(GUARDS))
def test_each_guard_spelling_keyed_on_the_vote_is_hc102(guard):
    text = method_source(guard=guard, guard_at="on-vote")
    codes = {f.code for f in lint_source(text).findings}
    assert "HC102" in codes
    assert "HC101" not in codes


@pytest.mark.parametrize("guard", list(GUARDS))
@pytest.mark.parametrize("reduce", list(REDUCES))
def test_each_guard_spelling_after_each_reduce_is_hc103(guard, reduce):
    text = method_source(guard=guard, reduce=reduce, guard_at="after-reduce")
    hits = [f for f in lint_source(text).findings if f.code == "HC103"]
    assert len(hits) == 1
    assert "after the cross-rank reduce" in hits[0].message


UPSTREAM_FEATURES = {**CANONICAL, "guard-key": "the vote, on completion"}


@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("pred_form", list(PREDICATES))
def test_missing_guard_is_fixed_with_the_files_names(param, pred_form):
    text = method_source(param=param, pred_form=pred_form, guard=None, guard_at="nowhere", evidence=True)
    assert [f.code for f in lint_source(text).findings] == ["HC101"]
    fixed = fix_source(text, FENCED)
    assert f"        if {'completed'} and {param}.pool_transfers and not {param}.pool_transfers_done:\n" in fixed
    assert [str(f) for f in lint_source(fixed, FENCED).findings] == []
    assert features(fixed) == CANONICAL
    # not fenced: upstream's guard after the policy branches, a warning left
    fixed = fix_source(text)
    assert f"\n            can_terminate = False\n        terminated = {param}.is_terminated()\n" in fixed
    assert [f.code for f in lint_source(fixed).findings] == ["HC107"]
    assert features(fixed) == UPSTREAM_FEATURES


def test_missing_guard_without_evidence_is_not_fixed():
    text = method_source(guard=None, guard_at="nowhere")
    (finding,) = lint_source(text, FENCED).findings
    assert (finding.code, finding.fixable) == ("HC101", False)
    assert fix_source(text, FENCED) == text


@pytest.mark.parametrize("guard", ["if-getattr", "if-attr", "and-assign", "iand", "nested", "alias-pending"])
def test_vote_keyed_guard_is_moved_onto_the_predicate(guard):
    text = method_source(guard=guard, guard_at="on-vote")
    fixed = fix_source(text, FENCED)
    assert [str(f) for f in lint_source(fixed, FENCED).findings] == []
    assert features(fixed) == CANONICAL
    fixed = fix_source(text)
    assert [f.code for f in lint_source(fixed).findings] == ["HC107"]
    assert features(fixed) == UPSTREAM_FEATURES


# Upstream's own spellings: the condition on completion, the vote forced.
UPSTREAM_GUARDS = {
    "getattr": (
        'if (\n    {P}\n    and getattr({O}, "pool_transfers", None)\n'
        '    and not getattr({O}, "pool_transfers_done", True)\n):\n    {V} = False'
    ),
    "attributes": "if {P} and {O}.pool_transfers and not {O}.pool_transfers_done:\n    {V} = False",
    "one-expression": (
        '{V} = {V} and not ({P} and getattr({O}, "pool_transfers", None) '
        'and not getattr({O}, "pool_transfers_done", True))'
    ),
    "nested": "if {P} and {O}.pool_transfers:\n    if not {O}.pool_transfers_done:\n        {V} = False",
}


def upstream_source(guard: str, reduce: str = "torch") -> str:
    text = method_source(guard=None, guard_at="nowhere", reduce=reduce)
    block = indent(UPSTREAM_GUARDS[guard].format(P="completed", O="operation", V="can_terminate"), 8)
    return text.replace("        terminated = operation.is_terminated()\n",
                        block + "\n        terminated = operation.is_terminated()\n")


@pytest.mark.parametrize("guard", list(UPSTREAM_GUARDS))
@pytest.mark.parametrize("reduce", list(REDUCES))
def test_upstream_shape_is_one_warning_and_not_fixed_by_default(guard, reduce):
    text = upstream_source(guard, reduce)
    result = lint_source(text)
    assert [f.code for f in result.findings] == ["HC107"], [str(f) for f in result.findings]
    assert result.exit_code == 0
    assert "issue #35012" in result.findings[0].message
    assert fix_source(text) == text
    assert features(text) == {**UPSTREAM_FEATURES, "reduce-op": "MAX"}
    fixed = fix_source(text, FENCED)
    assert fixed != text
    assert lint_source(fixed, FENCED).findings == []


def test_upstream_one_expression_folded_into_the_predicate_is_the_spec_form():
    text = method_source(guard=None, guard_at="nowhere").replace(
        "        if self.prefetch_stop_policy == \"wait_complete\":\n",
        "        completed = completed and not (getattr(operation, \"pool_transfers\", None)"
        " and not getattr(operation, \"pool_transfers_done\", True))\n"
        "        if self.prefetch_stop_policy == \"wait_complete\":\n", 1)
    assert lint_source(text).findings == []
    assert features(text) == CANONICAL


@pytest.mark.parametrize("form, code, fragment", [
    ("if can_terminate and operation.pool_transfers and not operation.pool_transfers_done:\n    can_terminate = False",
     "HC102", "conditioned on the vote"),
    ("if operation.pool_transfers and not operation.pool_transfers_done:\n    can_terminate = False",
     "HC102", "transfer state alone"),
    ("if not operation.pool_transfers_done:\n    can_terminate = False", "HC102", "transfer state alone"),
    ("if completed and operation.pool_transfers and not operation.pool_transfers_done:\n    can_terminate = True",
     "HC101", "forces nothing to no"),
])
def test_wrong_vote_forcing_guards_are_errors(form, code, fragment):
    text = method_source(guard=None, guard_at="nowhere").replace(
        "        terminated = operation.is_terminated()\n",
        indent(form, 8) + "\n        terminated = operation.is_terminated()\n")
    result = lint_source(text)
    assert [f.code for f in result.findings] == [code]
    assert fragment in result.findings[0].message
    assert result.exit_code == 1


def test_upstream_reduce_through_a_self_helper_needs_no_configuration():
    text = upstream_source("getattr").replace(
        "        torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)\n",
        "        self._all_reduce_attn_groups(states, torch.distributed.ReduceOp.MAX)\n").replace(
        "    def _prefetch_completed(self, op):",
        "    def _all_reduce_attn_groups(self, tensor, op):\n"
        "        for group in (self.attn_cp_group, self.attn_tp_group):\n"
        "            if group is not None:\n"
        "                torch.distributed.all_reduce(tensor, op=op, group=group)\n\n"
        "    def _prefetch_completed(self, op):")
    assert "self._all_reduce_attn_groups(states" in text
    feats = features(text)
    assert (feats["reduce-op"], feats["reduce-payload"]) == ("MAX", "[1-vote, terminated]")
    # the guard after the helper's reduce is after the reduce
    moved = text.replace(UPSTREAM_GUARDS and "", "")
    lines = moved.split("\n")
    start = lines.index("        if (")
    guard_lines = lines[start:start + 6]
    del lines[start:start + 6]
    at = lines.index("        return can_terminate or terminated")
    lines[at:at] = guard_lines
    hits = lint_source("\n".join(lines)).findings
    assert [(f.code, "after the cross-rank reduce" in f.message) for f in hits] == [("HC103", True)]
    # without the helper in the class (inherited, as 0.5.2x's `self._all_reduce`), its name says it
    # reduces, and the ReduceOp argument which op; a guard after it is after the reduce
    bare = text.split("    def _all_reduce_attn_groups")[0] + "    def _prefetch_completed" + \
        text.split("    def _prefetch_completed")[1]
    assert features(bare)["reduce-op"] == "MAX"
    inherited = "\n".join(lines).split("    def _all_reduce_attn_groups")[0] + "    def _prefetch_completed" + \
        "\n".join(lines).split("    def _prefetch_completed")[1]
    assert [f.code for f in lint_source(inherited).findings] == ["HC103"]
    # a helper named like nothing collective says nothing
    assert features(bare.replace("self._all_reduce_attn_groups(", "self._sync_states("))["reduce-op"] == "no reduce"


def test_inverted_check_is_not_a_guard():
    text = method_source(guard="if-attr").replace("and not operation.pool_transfers_done", "and operation.pool_transfers_done")
    assert [f.code for f in lint_source(text).findings] == ["HC101"]


def test_configured_method_names_and_reduce_calls():
    text = method_source().replace("can_terminate_prefetch", "may_stop_prefetch")
    assert lint_source(text).methods == 0
    config = Config(methods=("may_stop_prefetch",))
    assert lint_source(text, config).methods == 1
    custom = method_source(reduce="reducer").replace("self.reducer.all_reduce_max", "self.comm.vote_max")
    plain = {f.code for f in lint_source(custom).findings}
    assert plain == set()  # unknown call: no reduce seen, the guard still counts
    feats = Linter(Config(reduce_calls=("comm.vote_max",)))
    analysis = feats.lint_text(custom, "x.py")
    assert analysis.methods[0].features["reduce-op"].value == "MAX"
    default = Linter(Config()).lint_text(custom, "x.py")
    assert default.methods[0].features["reduce-op"].value == "no reduce"


def test_done_flag_read_through_a_snapshot_local():
    text = '''
class Cache:
    def can_terminate_prefetch(self, operation):
        snapshot = operation.progress()
        completed = snapshot.completed_tokens == len(snapshot.hash_value) * self.page_size
        side_pools_done = snapshot.pool_transfers_done
        if completed and not side_pools_done:
            completed = False
        return completed
''' + POOLED_TAIL
    assert lint_source(text).findings == []
    rebound = text.replace("side_pools_done = snapshot.pool_transfers_done\n",
                           "side_pools_done = snapshot.pool_transfers_done\n        side_pools_done = True\n")
    assert rebound != text
    assert [f.code for f in lint_source(rebound).findings] == ["HC101"]


def test_logging_the_predicate_before_the_guard_is_not_a_use():
    text = method_source(guard="if-attr").replace(
        "        if completed and operation.pool_transfers",
        "        if completed:\n            self.log.debug('kv complete for %s', operation)\n"
        "        if completed and operation.pool_transfers",
    )
    assert "self.log.debug" in text
    assert lint_source(text).findings == []
    deciding = text.replace("self.log.debug('kv complete for %s', operation)", "can_terminate = True")
    assert [f.code for f in lint_source(deciding).findings] == ["HC103"]

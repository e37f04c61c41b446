"""Upstream's decision code, read from an SGLang checkout at run time, in caches of ours.

- names.py: the shim's table (every upstream name the decision may read, and what it is here);
- source.py: find the class and the methods its can_terminate_prefetch reaches, with ast; check every name;
- shim.py: compile them against stand-ins for self, the operation, time and torch.distributed;
- caches.py: our three caches, each deciding with the matching upstream class's code;
- adapter.py: the conformance adapters (`pytest conformance/ --sglang PATH`).

Nothing from upstream is imported or copied: the code is read from the
user's checkout when the suite runs.
"""

from caches.upstream_decision.adapter import UpstreamDecisionAdapter, sglang_adapters

__all__ = ["UpstreamDecisionAdapter", "sglang_adapters"]

"""The adapter the harness runs for one SGLang tree: one row per live cache class.

Rows are named `sglang-live:<class>@<version or commit>`. Capabilities are
declared only for what the live build really offers: HiRadixCache on a plain
MHA KV pool has no extra pools (upstream attaches its indexer pool only for
DSA models, at 64-token pages), HiMambaRadixCache carries its mamba state
pool; copies are synchronous on CPU (no copy stream a gate could hold), so
held_copies is never declared; tests needing what is missing skip, saying
why. Several ranks join upstream's own gloo groups (runtime.ensure_process_group).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from conformance.adapter import CacheEnv
from conformance.live import evidence, runtime as live_runtime
from conformance.live.tree import SglangTree, locate


@dataclass(frozen=True)
class LiveClass:
    session: str  # module:class of its session
    capabilities: frozenset
    default_extra_pools: tuple


SESSIONS = {
    "HiRadixCache": LiveClass("conformance.live.hiradix:HiRadixSession", frozenset({"multi_rank", "kv_formats"}), ()),
    "HiMambaRadixCache": LiveClass("conformance.live.hi_mamba:HiMambaSession", frozenset({"multi_rank", "pool:mamba", "kv_formats"}), ("mamba",)),
    "UnifiedRadixCache": LiveClass("conformance.live.unified:UnifiedSession", frozenset({"multi_rank", "kv_formats"}), ()),
}


@dataclass(frozen=True)
class LiveAdapter:
    name: str
    tree: SglangTree
    class_name: str
    expected_failures: tuple = field(default=())
    # Read from the tree's own code, with file:line evidence (evidence.py; conformance/plugin/declarations.py).
    profile: str | None = None
    profile_evidence: tuple = ()
    deployment: Mapping[str, tuple] = field(default_factory=dict)

    @property
    def capabilities(self) -> frozenset:
        return SESSIONS[self.class_name].capabilities

    @property
    def default_extra_pools(self) -> tuple:
        return SESSIONS[self.class_name].default_extra_pools

    def _session_module(self) -> tuple[Any, str]:
        module_name, _, attr = SESSIONS[self.class_name].session.partition(":")
        return __import__(module_name, fromlist=[attr]), attr

    def create(self, env: CacheEnv) -> Any:
        module, attr = self._session_module()
        return getattr(module, attr)(live_runtime.load(self.tree), env)

    def configure(self, fields: Any) -> None:
        """C1/C2 through upstream's own configuration path (its CLI and extra-config parsers)."""
        module, _ = self._session_module()
        module.configure(live_runtime.load(self.tree), fields)


def adapters_for(tree: SglangTree) -> list[LiveAdapter]:
    deployment = evidence.deployment_of(tree)
    adapters = []
    for name in tree.classes:
        profile, why = evidence.profile_of(tree, name)
        adapters.append(LiveAdapter(f"sglang-live:{name}@{tree.label}", tree, name, profile=profile, profile_evidence=why, deployment=deployment))
    return adapters


if os.environ.get(live_runtime.PRELOAD_ENV):  # a multi-rank fork server: import the tree once, before forking ranks
    live_runtime.load(locate(os.environ[live_runtime.PRELOAD_ENV]))

"""The adapter the harness runs for one SGLang tree: one row per layout the tree runs (conformance/live/layouts).

Rows are named `sglang-live:<layout>@<version or commit>`, the layout being
the class, or `<class>+<build>` where one class runs in several builds (the
fork's HiRadixCache on MHA KV, and on a DSA model's KV with its indexer).
Capabilities are declared only for what the live build really offers
(copies are synchronous on CPU: no copy stream a gate could hold, so
held_copies is never declared); tests needing what is missing skip, saying
why. A build whose page size the tree's code fixes runs at it, with the line
that fixes it as evidence. Several ranks join upstream's own gloo groups
(runtime.ensure_process_group).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from conformance.adapter import CacheEnv
from conformance.live import evidence, runtime as live_runtime
from conformance.live.abort_paths import AbortPath, abort_paths_of
from conformance.live.layouts import BY_KEY
from conformance.live.tree import SglangTree, locate
from conformance.scenarios.schedule_model import DEFAULT_IO_ORDER

@dataclass(frozen=True)
class LiveAdapter:
    name: str
    tree: SglangTree
    layout_key: str
    expected_failures: tuple = field(default=())
    # Read from the tree's own code, with file:line evidence (evidence.py; conformance/implementations/declarations.py).
    profile: str | None = None
    profile_evidence: tuple = ()
    deployment: Mapping[str, tuple] = field(default_factory=dict)
    page_size: int | None = None  # the one page size the build runs at, where the tree's code fixes it
    page_size_evidence: tuple = ()
    io_order: str = DEFAULT_IO_ORDER  # how the build's IO thread orders a prefetch's pools (schedule_model.IO_ORDERS)
    io_order_evidence: tuple = ()
    ignored_fields: Mapping[str, tuple] = field(default_factory=dict)  # spec field -> why its key is accepted and never read
    # Each way the tree's scheduler drops a waiting request, and the cache call it makes then (abort_paths.py).
    abort_paths: Mapping[str, AbortPath] = field(default_factory=dict)

    @property
    def class_name(self) -> str:
        return BY_KEY[self.layout_key].class_name

    @property
    def capabilities(self) -> frozenset:
        # Upstream's writing_check starts a storage backup at the scheduler step after the host copy's ack, on every layout.
        return BY_KEY[self.layout_key].capabilities | {"stepped_backups"}

    @property
    def default_extra_pools(self) -> tuple:
        return BY_KEY[self.layout_key].default_extra_pools

    def _session_module(self) -> tuple[Any, str]:
        module_name, _, attr = BY_KEY[self.layout_key].session.partition(":")
        return importlib.import_module(module_name), attr

    def create(self, env: CacheEnv) -> Any:
        module, attr = self._session_module()
        session = getattr(module, attr)(live_runtime.load(self.tree), env)
        session.abort_paths = self.abort_paths
        return session

    def configure(self, fields: Any) -> None:
        """C1/C2 through upstream's own configuration path (its CLI and extra-config parsers)."""
        module, _ = self._session_module()
        module.configure(live_runtime.load(self.tree), fields)


def adapters_for(tree: SglangTree) -> list[LiveAdapter]:
    deployment = evidence.deployment_of(tree)
    abort_paths = abort_paths_of(tree)
    adapters = []
    refused = live_runtime.refused(tree)
    for key in (key for key in tree.layouts if key not in refused):
        layout = BY_KEY[key]
        profile, why = evidence.profile_of(tree, layout.class_name)
        page_size, page_why = evidence.page_size_of(tree, layout)
        io_order, io_why = evidence.io_order_of(tree, layout)
        adapters.append(LiveAdapter(f"sglang-live:{layout.row}@{tree.label}", tree, key, profile=profile, profile_evidence=why,
                                    deployment={**deployment, **evidence.layout_deployment(tree, layout)},
                                    page_size=page_size, page_size_evidence=page_why,
                                    io_order=io_order or DEFAULT_IO_ORDER, io_order_evidence=io_why,
                                    ignored_fields=evidence.ignored_fields(tree, layout), abort_paths=abort_paths))
    return adapters


if os.environ.get(live_runtime.PRELOAD_ENV):  # a multi-rank fork server: import the tree once, before forking ranks
    live_runtime.load(locate(os.environ[live_runtime.PRELOAD_ENV]))

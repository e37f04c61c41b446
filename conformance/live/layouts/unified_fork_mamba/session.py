"""The fork's UnifiedRadixCache with its mamba component: the fork's unified session (layouts/unified_fork) with what a
mamba component adds (layouts/unified_mamba's MambaComponentSession), the state read off the component's node data.
"""

from __future__ import annotations

from typing import Any, Sequence

from conformance.live.layouts.unified_fork.session import ForkUnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.unified_fork_mamba import LAYOUT
from conformance.live.layouts.unified_mamba.session import MambaComponentSession, UnifiedMambaSidecar


class ForkUnifiedMambaSidecar(UnifiedMambaSidecar):
    """The fork's tree has Python nodes and no tree core: a state's host slot is attached by the MAMBA component's own
    PREFETCH commit (commit_hicache_transfer, given the component's transfers), its device slot is the node's data."""

    COMPONENTS_MODULE = "tree_component"

    def prefetch_commit(self) -> tuple[Any, str]:
        return self.cache.components[self._component()], "commit_hicache_transfer"

    def mamba_transfers(self, transfers: Any) -> Sequence[Any]:
        return transfers or ()

    def device_value(self, node: Any) -> Any:
        return node.component_data[self._component()].value


class ForkUnifiedMambaSession(MambaComponentSession, ForkUnifiedSession):
    LAYOUT = LAYOUT
    SIDECAR = ForkUnifiedMambaSidecar

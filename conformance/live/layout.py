"""What declares one upstream layout to the harness: the class, the marks that tell its layout, its modules, what it offers.

A layout is one way upstream builds a cache class the harness can run: the
fork's HiRadixCache on MHA KV, the same class on a DSA model's latent KV with
its indexer, HiMambaRadixCache, 0.5.2x's UnifiedRadixCache. Each is one
declaration (conformance/live/layouts/<name>/__init__.py, no torch: the
pytest controller reads them), its session and its taps. The declarations
are data: a tree runs a layout when it defines the class and every mark
matches; otherwise the header names the layout and the first mark missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class Mark:
    """A line the tree's code must hold for the layout to be the one the harness is wired to."""

    file: str  # under sglang/
    pattern: str | None  # a regex some line must match; None: the file exists
    what: str  # what it says of the tree, for the line naming a layout not run
    absent: bool = False  # the pattern must not match: the line belongs to another layout of the class

    def missing_in(self, package: Path) -> str | None:
        """Why the mark does not hold in the package (None when it does)."""
        path = package / self.file
        if not path.is_file():
            return None if self.absent else f"sglang/{self.file} does not exist"
        if self.pattern is None:
            return None
        found = re.search(self.pattern, path.read_text(encoding="utf-8", errors="replace"), re.M) is not None
        if found == self.absent:
            return f"sglang/{self.file} has the {self.what}" if self.absent else f"sglang/{self.file} has no {self.what}"
        return None


@dataclass(frozen=True)
class Module:
    """An upstream module by its dotted name, and a name it defines: where a tree has no module of that name (modules
    move), the module of the tree that defines `defines` stands in (conformance/live/modules.py)."""

    dotted: str
    defines: str


@dataclass(frozen=True)
class LineRule:
    """A fact of a build read from one line of the tree: the first match of `pattern` in `within`'s body."""

    file: str  # under sglang/
    within: str  # the class whose body holds it
    pattern: str
    why: str  # what the line says, for the evidence


@dataclass(frozen=True)
class PageSizeRule(LineRule):
    """The page size a build demands: `pattern` has one integer group, and the line counts only outside a branch for
    another platform (the harness runs upstream's CPU/CUDA path)."""

    other_platform: str = r"^\s*(el)?if .*\b_?is_(hip|npu|xpu)\b"  # a branch header whose body is not the path run here


class IoOrderRule(LineRule):
    """The order the build's IO thread loads a prefetch in: where the line is, the sidecar pools load beside each KV
    batch (schedule_model's "extras_with_each_batch"); elsewhere after all of KV, the default."""


class HostLayoutRule(LineRule):
    """The host memory layout a build demands: `pattern` has one group, the layout's name. Without one, a session runs
    upstream's layer_first, as a user of the direct IO backend does."""


@dataclass(frozen=True)
class Layout:
    key: str  # unique among layouts: the row's name, with '/<line>' where builds of one row belong to different release lines
    class_name: str  # upstream's class
    module_file: str  # the class's module under sglang/
    layout_name: str  # how 'not run' lines name the layout
    session: str  # module:Class of its session
    modules: Mapping[str, "str | Module"]  # upstream modules the session uses beyond runtime.MODULES: short name -> module
    capabilities: frozenset[str]
    default_extra_pools: tuple[str, ...] = ()
    marks: tuple[Mark, ...] = ()
    # Host-pool modules (short names) whose pools are unpinned and whose CUDA-only copies become plain index copies.
    host_pool_modules: tuple[str, ...] = ("memory_pool_host",)
    # The KV is the same on every TP rank (MLA's latent): upstream backs it up from one rank only.
    kv_rank_replicated: bool = False
    # Where the tree's code fixes the page size this build runs at (None: the harness's default page size).
    page_size_rule: "PageSizeRule | None" = None
    # Where the tree's code fixes the host memory layout (None: layer_first).
    host_layout_rule: "HostLayoutRule | None" = None
    # Where the tree's code reads the KV-derived sidecars beside each KV batch (None: after all of KV).
    io_order_rule: "IoOrderRule | None" = None

    @property
    def row(self) -> str:
        """The matrix's name for it: the class, '+build' where one class runs in several builds. Layouts of one row
        are exclusive by their marks, so a row means the same build on every target of a sweep."""
        return self.key.partition("/")[0]

    def missing_in(self, package: Path) -> str | None:
        """The first mark the package lacks, as a 'not run' reason (None: the layout runs)."""
        for mark in self.marks:
            why = mark.missing_in(package)
            if why is not None:
                return why
        return None

"""The storage namespace: which stored bytes a cache may read.

Page keys identify tokens, not bytes: two models (or one model after a dtype
or layout change) produce the same keys for the same tokens and different
bytes for them. Bytes are interchangeable only between caches that agree on
every named field of the namespace, each stated once:

- `model_name`: the model identity (weights and revision);
- `dtype`: per pool, the element type of its bytes;
- `layout`: per pool, its unit, element shape and memory layout (how a
  page's slots lie in its bytes);
- `page_size`: tokens per page;
- `world_size`: the tensor-parallel world size (how a page is sharded);
- `rank`: which shard this cache stores.

A cache's file storage lives in

    <storage_path>/<model>.<digest>/rank<r>/

where the digest covers every field but the rank (what every rank of one
deployment shares), written down in a `namespace.json` next to the rank
folders; the rank names its folder and, with the digest, the tag every page
it writes carries. A cache in another namespace finds nothing in this
folder, and a page moved in from elsewhere is a miss with a recorded fault:
a mismatch is always a miss, never a load.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from caches.core.pools import MEMORY_LAYOUT

__all__ = ["StorageNamespace", "PoolLayout", "NAMESPACE_FILE"]

NAMESPACE_FILE = "namespace.json"
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PoolLayout:
    """What one slot of a pool is, apart from its dtype: its unit, element shape and memory layout."""

    unit: str
    elem_shape: tuple[int, ...]
    memory: str = MEMORY_LAYOUT

    def describe(self) -> dict[str, Any]:
        return {"unit": self.unit, "elem_shape": list(self.elem_shape), "memory": self.memory}


@dataclass(frozen=True)
class StorageNamespace:
    model_name: str
    dtype: tuple[tuple[str, str], ...]  # (pool, dtype name), by pool name
    layout: tuple[tuple[str, PoolLayout], ...]  # (pool, its layout), by pool name
    page_size: int
    world_size: int
    rank: int

    @classmethod
    def of(cls, *, model_name: str, page_size: int, specs: Sequence[Any], world_size: int, rank: int) -> "StorageNamespace":
        by_name = sorted(specs, key=lambda s: s.name)
        return cls(
            model_name=model_name,
            dtype=tuple((s.name, str(s.dtype).removeprefix("torch.")) for s in by_name),
            layout=tuple((s.name, PoolLayout(s.unit, tuple(s.elem_shape))) for s in by_name),
            page_size=page_size,
            world_size=world_size,
            rank=rank,
        )

    def describe(self) -> dict[str, Any]:
        """The named fields every rank of one deployment shares (the rank picks a subfolder): what the digest covers."""
        return {
            "model_name": self.model_name,
            "dtype": dict(self.dtype),
            "layout": {pool: layout.describe() for pool, layout in self.layout},
            "page_size": self.page_size,
            "world_size": self.world_size,
        }

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def folder(self) -> str:
        slug = _SLUG_UNSAFE.sub("_", self.model_name).strip("._")[:48] or "model"
        return f"{slug}.{self.digest}"

    @property
    def tag(self) -> str:
        """The namespace string a rank's file storage stamps into its pages: the digest and the rank, named."""
        return f"{self.digest}/rank{self.rank}"

    def rank_root(self, storage_path: str | Path) -> Path:
        """Create the namespace folder with its description; the rank's storage root inside it."""
        folder = Path(storage_path) / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        described = folder / NAMESPACE_FILE
        if not described.exists():  # every rank writes the same text: the last atomic rename wins
            temp = folder / f".{NAMESPACE_FILE}.{secrets.token_hex(6)}.tmp"
            temp.write_text(json.dumps(self.describe(), indent=2, sort_keys=True) + "\n")
            os.replace(temp, described)
        return folder / f"rank{self.rank}"

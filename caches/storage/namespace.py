"""The storage namespace: which stored bytes a cache may read.

Page keys identify tokens, not bytes: two models (or one model after a dtype
or layout change) produce the same keys for the same tokens and different
bytes for them. Bytes are interchangeable only between caches that agree on
the model identity (`model_name`), the dtype, every pool's name, unit and
element shape, the page size and the tensor-parallel world size; the rank
then picks the shard. A cache's file storage lives in

    <storage_path>/<model>.<digest of the above>/rank<r>/

next to a `namespace.json` saying what the digest covers, and every page it
writes carries a tag of that namespace and its rank. A cache in another
namespace finds nothing in this folder, and a page moved in from elsewhere is
a miss with a recorded fault: a mismatch is always a miss, never a load.
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

__all__ = ["StorageNamespace", "NAMESPACE_FILE"]

NAMESPACE_FILE = "namespace.json"
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PoolLayout:
    name: str
    unit: str
    elem_shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class StorageNamespace:
    model_name: str
    dtype: str
    page_size: int
    pools: tuple[PoolLayout, ...]
    world_size: int
    rank: int

    @classmethod
    def of(cls, *, model_name: str, dtype: str, page_size: int, specs: Sequence[Any], world_size: int, rank: int) -> "StorageNamespace":
        pools = tuple(sorted(
            (PoolLayout(s.name, s.unit, tuple(s.elem_shape), str(s.dtype).removeprefix("torch.")) for s in specs),
            key=lambda p: p.name,
        ))
        return cls(model_name, dtype, page_size, pools, world_size, rank)

    def describe(self) -> dict[str, Any]:
        """What every rank of one deployment shares (the rank picks a subfolder)."""
        return {
            "model_name": self.model_name,
            "dtype": self.dtype,
            "page_size": self.page_size,
            "pools": [{"name": p.name, "unit": p.unit, "elem_shape": list(p.elem_shape), "dtype": p.dtype} for p in self.pools],
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
        """The namespace string a rank's file storage stamps into its pages."""
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

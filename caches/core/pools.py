"""Named pools (KV and the extra pools that travel with it) and their memory.

A pool is described once by a :class:`PoolSpec` and materialised per tier as a
:class:`PoolBuffer` (one tensor ``[num_slots, *elem_shape]``). A cache keeps the
pools of one tier together in a :class:`PoolSet`.
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence, Union

import torch

from caches.errors import CacheError
from spec.errors import bounded_repr
from spec.fence import HitPolicy  # the spec owns the notion; pools only use it

__all__ = [
    "HitPolicy",
    "MEMORY_LAYOUT",
    "PoolSpec",
    "PoolBuffer",
    "PoolSet",
    "PoolSpecError",
    "PoolSlotError",
    "PoolSetError",
    "UnknownPoolError",
    "tensor_bytes_view",
    "check_slots",
    "DeviceLike",
]

DeviceLike = Union[torch.device, str]

POOL_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
UNITS = ("token", "state")
# How every PoolBuffer lays out its bytes: one C-order row of elem_shape per slot,
# slots in order, so a page is page_size consecutive rows. Stored pages keep it
# (caches/storage/namespace.py): another layout must be another namespace.
MEMORY_LAYOUT = "slot_major"


class PoolSpecError(CacheError, ValueError):
    """A pool description or a pool buffer's construction argument is invalid."""


class PoolSlotError(CacheError, ValueError):
    """Slot indices or data handed to a pool buffer do not fit it."""


class PoolSetError(CacheError, ValueError):
    """The pools of one tier do not form a valid set."""


class UnknownPoolError(CacheError, KeyError):
    """A pool set has no pool of that name (a KeyError, as a mapping's lookup is)."""


def _is_int(value: object) -> bool:
    # bool is an int subclass, but True as a size is always a mistake.
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_pool_name(name: object) -> None:
    if not isinstance(name, str) or POOL_NAME_PATTERN.fullmatch(name) is None:
        raise PoolSpecError(
            f"PoolSpec.name={bounded_repr(name)} is invalid: expected a lowercase identifier "
            f"matching [a-z][a-z0-9_]*"
        )


@dataclass(frozen=True)
class PoolSpec:
    """What one pool stores per slot and how a prefix hit on it is judged.

    ``unit="token"``: one slot per token, slots grouped in pages.
    ``unit="state"``: one slot per request or tree node (e.g. a recurrent state).
    ``window_tokens``: for a TRAILING_WINDOW pool, the tokens before a match
    end it must hold (a whole number of pages); 0 for every other pool.
    """

    name: str
    unit: str
    elem_shape: tuple[int, ...]
    dtype: torch.dtype
    hit_policy: HitPolicy
    shares_kv_slots: bool = False
    window_tokens: int = 0

    def __post_init__(self) -> None:
        _validate_pool_name(self.name)
        if self.unit not in UNITS:
            raise PoolSpecError(
                f"PoolSpec.unit={bounded_repr(self.unit)} for pool '{self.name}' is invalid: "
                f"accepted values are {', '.join(repr(u) for u in UNITS)}"
            )
        if isinstance(self.elem_shape, list):
            # A list is the same shape spelled differently; store the hashable form.
            object.__setattr__(self, "elem_shape", tuple(self.elem_shape))
        if not isinstance(self.elem_shape, tuple) or not all(
            _is_int(d) and d > 0 for d in self.elem_shape
        ):
            raise PoolSpecError(
                f"PoolSpec.elem_shape={bounded_repr(self.elem_shape)} for pool '{self.name}' is "
                f"invalid: expected a tuple of positive ints"
            )
        if not isinstance(self.dtype, torch.dtype):
            raise PoolSpecError(
                f"PoolSpec.dtype={bounded_repr(self.dtype)} for pool '{self.name}' is invalid: "
                f"expected a torch.dtype such as torch.bfloat16"
            )
        if not isinstance(self.hit_policy, HitPolicy):
            raise PoolSpecError(
                f"PoolSpec.hit_policy={bounded_repr(self.hit_policy)} for pool '{self.name}' is "
                f"invalid: accepted values are "
                f"{', '.join('HitPolicy.' + p.name for p in HitPolicy)}"
            )
        if not isinstance(self.shares_kv_slots, bool):
            raise PoolSpecError(
                f"PoolSpec.shares_kv_slots={bounded_repr(self.shares_kv_slots)} for pool "
                f"'{self.name}' is invalid: expected True or False"
            )
        if self.shares_kv_slots and (self.name == "kv" or self.unit != "token"):
            raise PoolSpecError(
                f"PoolSpec.shares_kv_slots=True for pool '{self.name}' "
                f"(unit={bounded_repr(self.unit)}) is invalid: only a token pool other than "
                f"'kv' can reuse the KV pool's slot numbers"
            )
        windowed = self.hit_policy is HitPolicy.TRAILING_WINDOW
        if not _is_int(self.window_tokens) or self.window_tokens < 0 or (self.window_tokens > 0) != windowed or (
            windowed and (self.unit != "token" or self.shares_kv_slots)
        ):
            raise PoolSpecError(
                f"PoolSpec.window_tokens={bounded_repr(self.window_tokens)} for pool '{self.name}' "
                f"(hit_policy={self.hit_policy}, unit={bounded_repr(self.unit)}) is invalid: a TRAILING_WINDOW "
                f"token pool with slots of its own has window_tokens > 0, every other pool 0"
            )
        if self.name == "kv" and (
            self.unit != "token" or self.hit_policy is not HitPolicy.ALL_PAGES
        ):
            raise PoolSpecError(
                f"pool 'kv' must have unit='token' and hit_policy=HitPolicy.ALL_PAGES, "
                f"got unit={bounded_repr(self.unit)}, hit_policy={self.hit_policy}"
            )

    @classmethod
    def kv(cls, elem_shape: Sequence[int], dtype: torch.dtype) -> "PoolSpec":
        return cls("kv", "token", tuple(elem_shape), dtype, HitPolicy.ALL_PAGES)

    @classmethod
    def indexer(cls, elem_shape: Sequence[int], dtype: torch.dtype) -> "PoolSpec":
        return cls(
            "indexer", "token", tuple(elem_shape), dtype, HitPolicy.ALL_PAGES,
            shares_kv_slots=True,
        )

    @classmethod
    def mamba(cls, elem_shape: Sequence[int], dtype: torch.dtype) -> "PoolSpec":
        return cls("mamba", "state", tuple(elem_shape), dtype, HitPolicy.TRAILING_PAGES)

    @classmethod
    def swa(cls, elem_shape: Sequence[int], dtype: torch.dtype, window_tokens: int) -> "PoolSpec":
        """Sliding-window KV: token rows in slot numbers of its own; a match needs the last window of them."""
        return cls("swa", "token", tuple(elem_shape), dtype, HitPolicy.TRAILING_WINDOW, window_tokens=window_tokens)

    @property
    def bytes_per_slot(self) -> int:
        return math.prod(self.elem_shape) * self.dtype.itemsize

    def slots_per_page(self, page_size: int) -> int:
        """Slots one page of this pool spans: ``page_size`` for token pools, 1 for state."""
        if not _is_int(page_size) or page_size <= 0:
            raise PoolSpecError(
                f"page_size={bounded_repr(page_size)} is invalid: expected a positive int"
            )
        return page_size if self.unit == "token" else 1

    def bytes_per_page(self, page_size: int) -> int:
        return self.slots_per_page(page_size) * self.bytes_per_slot


def tensor_bytes_view(tensor: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory (any dtype).

    Built through ctypes so that no numpy is needed and bfloat16 works; the view
    keeps the tensor alive for as long as it exists.
    """
    if tensor.device.type != "cpu":
        raise PoolSlotError(
            f"tensor on device '{tensor.device}' has no byte view: only CPU tensors "
            f"can be viewed as bytes"
        )
    if not tensor.is_contiguous():
        raise PoolSlotError(
            f"tensor of shape {tuple(tensor.shape)} with strides {tensor.stride()} is "
            f"not contiguous: a byte view needs contiguous memory"
        )
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(bytearray())
    raw = (ctypes.c_ubyte * nbytes).from_address(tensor.data_ptr())
    raw._owner = tensor  # the memoryview references raw, raw references the tensor
    return memoryview(raw).cast("B")


def check_slots(slots: object, num_slots: int, what: str) -> torch.Tensor:
    """Validate a 1-D int64 slot tensor against ``[0, num_slots)``; return it."""
    if not isinstance(slots, torch.Tensor):
        raise PoolSlotError(
            f"{what}={type(slots).__name__} is invalid: expected a 1-D torch.int64 tensor"
        )
    if slots.dtype != torch.int64 or slots.dim() != 1:
        raise PoolSlotError(
            f"{what} (dtype={slots.dtype}, shape={tuple(slots.shape)}) is invalid: "
            f"expected a 1-D torch.int64 tensor"
        )
    if slots.numel():
        # On an accelerator this reads two scalars back (a sync): correctness first.
        low, high = (int(v) for v in torch.aminmax(slots))
        if low < 0 or high >= num_slots:
            bad = low if low < 0 else high
            raise PoolSlotError(
                f"{what} contains slot {bad}, outside the pool's range [0, {num_slots})"
            )
    return slots


class PoolBuffer:
    """The memory of one pool on one tier: a tensor ``[num_slots, *elem_shape]`` (MEMORY_LAYOUT)."""

    def __init__(
        self,
        spec: PoolSpec,
        num_slots: int,
        device: DeviceLike,
        *,
        pin_memory: bool | None = None,
    ) -> None:
        if not isinstance(spec, PoolSpec):
            raise PoolSpecError(
                f"spec={bounded_repr(spec)} is invalid: expected a PoolSpec"
            )
        if not _is_int(num_slots) or num_slots <= 0:
            raise PoolSpecError(
                f"num_slots={bounded_repr(num_slots)} for pool '{spec.name}' is invalid: "
                f"expected a positive int"
            )
        try:
            where = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise PoolSpecError(
                f"device={bounded_repr(device)} for pool '{spec.name}' is invalid: {exc}"
            ) from None
        if pin_memory is not None and not isinstance(pin_memory, bool):
            raise PoolSpecError(
                f"pin_memory={bounded_repr(pin_memory)} for pool '{spec.name}' is invalid: "
                f"expected True, False or None"
            )
        pinned = bool(pin_memory)
        if pinned and where.type != "cpu":
            raise PoolSpecError(
                f"pin_memory=True for pool '{spec.name}' on device '{where}' is invalid: "
                f"only host (cpu) buffers can be pinned"
            )
        self.spec = spec
        self.num_slots = num_slots
        # Zero-filled so that never-written slots read as a known value.
        self.tensor = torch.zeros(
            (num_slots, *spec.elem_shape), dtype=spec.dtype, device=where,
            pin_memory=pinned,
        )
        self.torch_device = self.tensor.device
        self.pinned = pinned

    @classmethod
    def host(cls, spec: PoolSpec, num_slots: int, for_device: DeviceLike) -> "PoolBuffer":
        """A host buffer serving a cache on ``for_device`` (pinned iff that is CUDA)."""
        cache_device = torch.device(for_device)
        return cls(spec, num_slots, "cpu", pin_memory=cache_device.type == "cuda")

    @classmethod
    def device(cls, spec: PoolSpec, num_slots: int, device: DeviceLike) -> "PoolBuffer":
        return cls(spec, num_slots, device, pin_memory=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_host(self) -> bool:
        return self.torch_device.type == "cpu"

    def __repr__(self) -> str:
        return (
            f"PoolBuffer({self.spec.name!r}, num_slots={self.num_slots}, "
            f"device='{self.torch_device}', pinned={self.pinned})"
        )

    def _slots_here(self, slots: object, what: str) -> torch.Tensor:
        checked = check_slots(slots, self.num_slots, f"{what} for pool '{self.spec.name}'")
        return checked.to(self.torch_device, non_blocking=True)

    def _check_range(self, first_slot: int, num_slots: int) -> None:
        if not _is_int(first_slot) or not _is_int(num_slots):
            raise PoolSlotError(
                f"slot range (first_slot={bounded_repr(first_slot)}, num_slots={bounded_repr(num_slots)}) for "
                f"pool '{self.spec.name}' is invalid: expected ints"
            )
        if first_slot < 0 or num_slots <= 0 or first_slot + num_slots > self.num_slots:
            raise PoolSlotError(
                f"slot range [{first_slot}, {first_slot + num_slots}) for pool "
                f"'{self.spec.name}' is invalid: expected a non-empty range inside "
                f"[0, {self.num_slots})"
            )

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """A copy of the given slots, shape ``[len(slots), *elem_shape]``."""
        return self.tensor.index_select(0, self._slots_here(slots, "slots"))

    def write(self, slots: torch.Tensor, data: torch.Tensor) -> None:
        index = self._slots_here(slots, "slots")
        expected = (index.numel(), *self.spec.elem_shape)
        if not isinstance(data, torch.Tensor) or tuple(data.shape) != expected or (
            data.dtype != self.spec.dtype
        ):
            got = (
                f"shape={tuple(data.shape)}, dtype={data.dtype}"
                if isinstance(data, torch.Tensor) else type(data).__name__
            )
            raise PoolSlotError(
                f"data ({got}) for pool '{self.spec.name}' is invalid: expected a "
                f"tensor of shape {expected} and dtype {self.spec.dtype}"
            )
        self.tensor.index_copy_(0, index, data.to(self.torch_device))

    def page_view(self, first_slot: int, num_slots: int) -> torch.Tensor:
        """A contiguous view of ``num_slots`` slots from ``first_slot`` (no copy)."""
        self._check_range(first_slot, num_slots)
        return self.tensor[first_slot:first_slot + num_slots]

    def as_bytes_view(self, first_slot: int, num_slots: int) -> memoryview:
        """A writable byte view of a slot range of a host buffer (for ``readinto``)."""
        if not self.is_host:
            raise PoolSlotError(
                f"pool '{self.spec.name}' lives on device '{self.torch_device}': only "
                f"host (cpu) buffers have a byte view"
            )
        return tensor_bytes_view(self.page_view(first_slot, num_slots))


class PoolSet(Mapping[str, PoolBuffer]):
    """The pools of one cache on one tier, by name. Exactly one is ``kv``.

    ``sizes`` maps pool name to slot count. A pool with ``shares_kv_slots`` uses
    the KV pool's slot numbers, so its size is the KV size; it may be omitted
    from ``sizes`` and, if given, must equal it.
    """

    def __init__(
        self,
        specs: Sequence[PoolSpec],
        sizes: Mapping[str, int],
        device: DeviceLike,
        *,
        pin_memory: bool | None = None,
    ) -> None:
        specs = list(specs)
        for spec in specs:
            if not isinstance(spec, PoolSpec):
                raise PoolSetError(f"specs contains {bounded_repr(spec)}: expected PoolSpec items")
        names = [spec.name for spec in specs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PoolSetError(
                f"specs contain duplicate pool names {duplicates}: each pool name "
                f"must appear once"
            )
        if "kv" not in names:
            raise PoolSetError(
                f"specs (pools {names}) are invalid: exactly one pool must be named 'kv'"
            )
        unknown = sorted(set(sizes) - set(names))
        if unknown:
            raise PoolSetError(
                f"sizes names pools {unknown} that are not in specs {names}"
            )
        if "kv" not in sizes:
            raise PoolSetError("sizes has no entry for 'kv': every pool set needs its KV size")
        resolved: dict[str, int] = {}
        for spec in specs:
            if spec.shares_kv_slots:
                given = sizes.get(spec.name, sizes["kv"])
                if given != sizes["kv"]:
                    raise PoolSetError(
                        f"sizes['{spec.name}']={bounded_repr(given)} is invalid: pool '{spec.name}' "
                        f"shares the KV pool's slot numbers, so its size must equal "
                        f"sizes['kv']={bounded_repr(sizes['kv'])}"
                    )
                resolved[spec.name] = given
            elif spec.name not in sizes:
                raise PoolSetError(
                    f"sizes has no entry for pool '{spec.name}': expected a positive int"
                )
            else:
                resolved[spec.name] = sizes[spec.name]
        self._buffers: dict[str, PoolBuffer] = {
            spec.name: PoolBuffer(spec, resolved[spec.name], device, pin_memory=pin_memory)
            for spec in specs
        }

    @classmethod
    def host(
        cls, specs: Sequence[PoolSpec], sizes: Mapping[str, int], for_device: DeviceLike
    ) -> "PoolSet":
        """Host pools serving a cache on ``for_device`` (pinned iff that is CUDA)."""
        return cls(specs, sizes, "cpu", pin_memory=torch.device(for_device).type == "cuda")

    @classmethod
    def device(
        cls, specs: Sequence[PoolSpec], sizes: Mapping[str, int], device: DeviceLike
    ) -> "PoolSet":
        return cls(specs, sizes, device, pin_memory=False)

    def __getitem__(self, name: str) -> PoolBuffer:
        try:
            return self._buffers[name]
        except KeyError:
            raise UnknownPoolError(
                f"no pool named {bounded_repr(name)} in this pool set (pools: {list(self._buffers)})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._buffers)

    def __len__(self) -> int:
        return len(self._buffers)

    @property
    def kv(self) -> PoolBuffer:
        return self._buffers["kv"]

    @property
    def extras(self) -> list[PoolBuffer]:
        """Every pool but KV, in construction order."""
        return [buf for name, buf in self._buffers.items() if name != "kv"]

    @property
    def specs(self) -> list[PoolSpec]:
        return [buf.spec for buf in self._buffers.values()]

    def __repr__(self) -> str:
        return f"PoolSet({list(self._buffers.values())!r})"

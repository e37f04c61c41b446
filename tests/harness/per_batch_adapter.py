"""An implementation that follows the spec in another IO order: every KV batch carries its extra pools.

HiRadix (KV plus the ALL_PAGES indexer) whose IO thread loads each batch
of pages as one multi-pool get of KV and indexer (KV's gate first), batch
after batch, instead of KV batch by batch and the indexer after all of KV.
Both orders keep the spec: a group once begun runs to its end, terminate
starts nothing more, and the fence commits only pages every pool holds.

`factory` declares the order (io_order = "extras_with_each_batch", see
conformance/ADAPTERS.md), so the harness's expectations follow it;
`undeclared` is the same cache declaring nothing (the default order), which
the exploration must catch. Loaded by tests/harness/test_io_order.py
through --cache-impl, as a third party's adapter would be.
"""

from __future__ import annotations

from dataclasses import dataclass

from caches.adapters import CacheSession, config_for
from caches.core.controller import StorageController, _leading
from caches.hiradix import HiRadixCache
from caches.storage import PoolTransfer
from conformance.scenarios.schedule_model import EXTRAS_WITH_EACH_BATCH
from spec.fence import HitPolicy


class ExtrasWithEachBatch(StorageController):
    """The IO thread's load: one multi-pool get per batch of pages (KV and every extra pool)."""

    def _load(self, op) -> None:
        ps = self.page_size
        hashes = list(op.progress().hash_value)
        plans = [op.plan("kv"), *op.pool_transfers]
        if any(plan.hit_policy is not HitPolicy.ALL_PAGES for plan in plans):
            raise ValueError("extras_with_each_batch: every extra pool must hold a row per token (ALL_PAGES)")
        loaded = 0
        for first in range(0, len(hashes), self.batch_pages):
            last = min(len(hashes), first + self.batch_pages)
            begun = []
            for plan in plans:
                slots = plan.slots[first * ps : last * ps].tolist()
                start = op.begin_io(plan.pool, slots)
                if start.refused:  # terminated meanwhile: end what was begun, untouched
                    for b_plan, b_start, b_slots in begun:
                        op.end_io(b_start, b_plan.pool, (), b_slots)
                    begun = None
                    break
                begun.append((plan, start, slots))
            if begun is None:
                break
            transfers = [
                PoolTransfer(plan.pool, hashes[first:last], [self.host_pools[plan.pool].page_view(s, ps) for s in slots[::ps]])
                for plan, _, slots in begun
            ]

            def get_all(begun=begun, transfers=transfers):
                for _, start, _ in begun:
                    self.trace.gate(start.event)
                return self.storage.get_v2(transfers)

            results = self._storage_call("batch_get", op.request_id, get_all) or [[False] * (last - first)] * len(begun)
            arrived = [_leading(ok) for ok in results]  # per pool, KV first
            counted = True
            for (plan, start, slots), own in zip(begun, arrived):
                progress = {"tokens": own * ps} if plan.pool == "kv" else {"pages": first + own}
                counted = op.end_io(start, plan.pool, slots[: own * ps], slots[own * ps :], **progress) and counted
            if not counted:
                break  # terminated meanwhile, or the batch ran past its bound (L4)
            # The hit follows KV; a pool that fell short stops the loads, and the fence (F3) commits what every pool holds.
            loaded += arrived[0]
            if min(arrived) < last - first:
                break
        if loaded and not op.is_terminated():
            op.trim_hit(loaded)  # the hit follows KV, as in the default order
        elif not op.is_terminated():
            op.revoke("io_failed")
        op.finish_transfers()


class PerBatchHiRadix(HiRadixCache):
    controller_class = ExtrasWithEachBatch


@dataclass(frozen=True)
class PerBatchAdapter:
    name: str = "hiradix_per_batch"
    default_extra_pools: tuple[str, ...] = ("indexer",)
    capabilities: frozenset[str] = frozenset({"pool:indexer", "multi_rank"})
    io_order: str = EXTRAS_WITH_EACH_BATCH

    def create(self, env) -> CacheSession:
        cache = PerBatchHiRadix(config_for(env), trace=env.trace, clock=env.clock, process_group=env.process_group)
        return CacheSession(cache)


@dataclass(frozen=True)
class UndeclaredAdapter:
    """The same cache, declaring no IO order (so the default, which it does not follow)."""

    name: str = "hiradix_per_batch_undeclared"
    default_extra_pools: tuple[str, ...] = ("indexer",)
    capabilities: frozenset[str] = frozenset({"pool:indexer"})

    def create(self, env) -> CacheSession:
        return PerBatchAdapter().create(env)


def factory() -> PerBatchAdapter:
    return PerBatchAdapter()


def undeclared() -> UndeclaredAdapter:
    return UndeclaredAdapter()

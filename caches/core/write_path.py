"""The write path: device data into the tree, backups to host and storage, eviction.

Write policies: write_through backs a node up to host on its first hit,
write_through_selective on its second, write_back only when it is evicted.
Device->host copies are acknowledged in counts every rank agrees on, then the
host copy goes to storage on the backup thread, again acknowledged in agreed
counts. A node stays device-pinned while its copy runs and host-pinned while
its storage backup runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import torch

from caches.core.arguments import checked_count, checked_tokens
from caches.core.controller import BackupJob
from caches.core.copies import CopyRecord
from caches.core.state import StateRef
from caches.core.tree import InsertResult, MatchResult, TreeNode
from caches.errors import CacheArgumentError, CacheFullError, CacheTimeoutError
from spec.trace import DEVICE, HOST, WRITE_BACK_COPY

if TYPE_CHECKING:
    from caches.core.cache_base import HierarchicalCache

HIT_THRESHOLD = {"write_through": 1, "write_through_selective": 2, "write_back": None}

__all__ = ["CacheFullError", "HIT_THRESHOLD", "PendingWrite", "WritePath"]


@dataclass
class PendingWrite:
    """A device->host backup of one node (split into parts if the node was split meanwhile)."""

    parts: list[tuple[TreeNode, torch.Tensor]]
    locked: TreeNode
    states: dict[str, int]
    records: list[CopyRecord] = field(default_factory=list)

    def done(self) -> bool:
        return all(r.handle.done() and r.ok is not None for r in self.records)

    def ok(self) -> bool:
        return all(r.ok for r in self.records)

    def split(self, head: TreeNode, tail: TreeNode) -> None:
        for index, (node, host) in enumerate(self.parts):
            if node is tail:
                cut = len(head.key)
                self.parts[index : index + 1] = [(head, host[:cut]), (tail, host[cut:])]
                head.ext["pending_write"] = self
                return


class WritePath:
    def write(self: "HierarchicalCache", tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> InsertResult | None:
        """A request finished: its data for the full pages of `tokens` enters the device tier.

        data[token pool]: [>= full-page tokens, *elem_shape]; data[state pool]
        (optional): [1, *elem_shape], the state after the last full page.
        Everything is checked before a slot is taken: a refused write changes nothing.
        """
        self._ensure_usable("write")
        tokens = checked_tokens(tokens)
        count = len(tokens) - len(tokens) % self.page_size
        self._check_write_data(data, count)
        if count == 0:
            return None
        slots = self._alloc(DEVICE, "kv", count)
        if slots is None:
            raise CacheFullError(f"{self.name}: device tier cannot hold {count} tokens even after eviction")
        states: dict[str, int] = {}
        try:
            for pool in self.token_pools:
                self.device_pools[pool].write(slots, data[pool][:count].to(self.device))
            for pool in self.state_pools:
                if pool in data:
                    slot = self._alloc(DEVICE, "state", 1)
                    if slot is None:
                        continue  # no room for the state: the prefix is cached without it
                    states[pool] = int(slot[0])
                    self.device_pools[pool].write(slot, data[pool].reshape(1, *self.device_pools[pool].spec.elem_shape).to(self.device))
        except BaseException:
            self.copies.free(DEVICE, "kv", slots, pools=self.token_pools)
            for pool, slot in states.items():
                self.copies.free(DEVICE, "state", [slot], pools=[pool])
            raise
        return self.insert(tokens[:count], slots, states=states)

    def insert(self: "HierarchicalCache", tokens: Sequence[int], device_slots: torch.Tensor, *, states: Mapping[str, int] | None = None) -> InsertResult:
        result = self.tree.insert(tokens, device_slots)
        if result.duplicate_slots.numel():
            # F9: freed only once no copy into or out of them is pending.
            self.copies.free(DEVICE, "kv", result.duplicate_slots, pools=self.token_pools)
        node = result.node
        for pool, slot in (states or {}).items():
            ref = self.states(node).setdefault(pool, self._new_state_ref())
            if ref.device is None:
                ref.device = slot
            else:
                self.copies.free(DEVICE, "state", [slot], pools=[pool])
        touched = [*result.existing_nodes, *result.restored_nodes]
        if result.new_node is not None:
            touched.append(result.new_node)
        for n in touched:
            n.hit_count += 1
        self._back_up_by_policy(touched)
        return result

    def match_prefix(self: "HierarchicalCache", tokens: Sequence[int]) -> MatchResult:
        self._ensure_usable("match_prefix")
        result = self.tree.match_prefix(checked_tokens(tokens))
        path = self.tree.path_to(result.device_node)
        for node in path:
            node.hit_count += 1
        self._back_up_by_policy(path)
        return result

    def _new_state_ref(self: "HierarchicalCache") -> StateRef:
        return StateRef()

    def _check_write_data(self: "HierarchicalCache", data: Any, count: int) -> None:
        if not isinstance(data, Mapping):
            raise CacheArgumentError("data", type(data).__name__, "a mapping of pool name to tensor")
        for pool in data:
            if pool not in self.device_pools:
                raise CacheArgumentError("data", pool, "pools of this cache: " + ", ".join(self.device_pools))
        for pool in self.token_pools:
            spec = self.device_pools[pool].spec
            tensor = data.get(pool)
            if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 + len(spec.elem_shape) or tensor.shape[0] < count or tuple(tensor.shape[1:]) != spec.elem_shape or tensor.dtype != spec.dtype:
                got = None if tensor is None else (tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__)
                raise CacheArgumentError(f"data[{pool!r}]", got, f"a {spec.dtype} tensor of shape [>= {count}, {', '.join(map(str, spec.elem_shape))}]")
        for pool in self.state_pools:
            tensor = data.get(pool)
            if tensor is None:
                continue
            spec = self.device_pools[pool].spec
            if not isinstance(tensor, torch.Tensor) or tensor.numel() != spec.bytes_per_slot // spec.dtype.itemsize or tensor.dtype != spec.dtype:
                got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise CacheArgumentError(f"data[{pool!r}]", got, f"a {spec.dtype} tensor of shape [1, {', '.join(map(str, spec.elem_shape))}]")

    # --- device -> host ----------------------------------------------------------

    def _back_up_by_policy(self: "HierarchicalCache", nodes: Sequence[TreeNode]) -> None:
        threshold = HIT_THRESHOLD[self.config.write_policy]
        if threshold is None:
            return
        for node in nodes:
            if node.hit_count >= threshold:
                self._write_backup(node)

    def _write_backup(self: "HierarchicalCache", node: TreeNode) -> bool:
        if node is self.tree.root or node.value is None or node.host_value is not None or "pending_write" in node.ext:
            return False
        parent = node.parent
        if parent is not self.tree.root and parent.host_value is None and "pending_write" not in parent.ext:
            return False  # backups form a prefix from the root
        host = self._alloc(HOST, "kv", len(node.key))
        if host is None:
            return False
        states: dict[str, int] = {}
        for pool, ref in self.states(node).items():
            if ref.device is not None and ref.host is None:
                slot = self._alloc(HOST, "state", 1)
                if slot is not None:
                    states[pool] = int(slot[0])
        self.tree.lock(node)
        pending = PendingWrite(parts=[(node, host)], locked=node, states=states)
        node.ext["pending_write"] = pending
        for pool in self.token_pools:
            pending.records.append(self.copies.copy(
                pool=pool, group="kv", direction=WRITE_BACK_COPY,
                dst=self.host_pools[pool], dst_slots=host, src=self.device_pools[pool], src_slots=node.value,
            ))
        for pool, slot in states.items():
            device_slot = self.states(node)[pool].device
            pending.records.append(self.copies.copy(
                pool=pool, group="state", direction=WRITE_BACK_COPY,
                dst=self.host_pools[pool], dst_slots=torch.tensor([slot]),
                src=self.device_pools[pool], src_slots=torch.tensor([device_slot]),
            ))
        self._pending_writes.append(pending)
        return True

    def writing_check(self: "HierarchicalCache") -> None:
        """Apply finished backups, in counts every rank agrees on."""
        self._ensure_usable("writing_check")
        self._writing_check()

    def _writing_check(self: "HierarchicalCache") -> None:
        self.copies.poll()
        ready = 0
        for pending in self._pending_writes:
            if not pending.done():
                break
            ready += 1
        take = self.reducer.all_reduce_min([ready], name="write_ack")[0]
        acked, self._pending_writes = self._pending_writes[:take], self._pending_writes[take:]
        for pending in acked:
            self._ack_write(pending)
        for job in self.backup_acks.drain():
            self._ack_backup(job)

    def _ack_write(self: "HierarchicalCache", pending: PendingWrite) -> None:
        ok = pending.ok()
        self.tree.unlock(pending.locked)
        backed_up = []
        for node, host in pending.parts:
            node.ext.pop("pending_write", None)
            parent_ok = node.parent is self.tree.root or node.parent.host_value is not None
            if ok and node.host_value is None and parent_ok:
                self.tree.set_host_value(node, host)
                backed_up.append(node)
            else:
                self.copies.free(HOST, "kv", host, pools=self.token_pools)
        tail = pending.locked
        for pool, slot in pending.states.items():
            ref = self.states(tail).get(pool)
            if ok and ref is not None and ref.host is None and tail.host_value is not None:
                ref.host = slot
            else:
                self.copies.free(HOST, "state", [slot], pools=[pool])
        for node in backed_up:
            self._submit_backup(node)

    def _submit_backup(self: "HierarchicalCache", node: TreeNode) -> None:
        slots: dict[str, torch.Tensor] = {pool: node.host_value for pool in self.token_pools}
        per_page = {pool: True for pool in self.token_pools}
        for pool, ref in self.states(node).items():
            if ref.host is not None:
                slots[pool] = torch.tensor([ref.host])
                per_page[pool] = False
                ref.host_ref += 1
        self.tree.pin_host(node)
        job = BackupJob(node_id=node.id, hashes=list(node.hash_value), slots=slots, per_page=per_page, node=node)
        with self._backup_cv:
            self._backups_in_flight += 1
        self.controller.submit_backup(job)

    def _backup_done(self: "HierarchicalCache", job: BackupJob) -> None:
        # Runs on the backup thread: hand the ack to the scheduler, nothing else.
        self.backup_acks.put(job)
        with self._backup_cv:
            self._backup_cv.notify_all()

    def _ack_backup(self: "HierarchicalCache", job: BackupJob) -> None:
        node = job.node
        self.tree.unpin_host(node)
        for pool, ref in self.states(node).items():
            if pool in job.slots and ref.host_ref:
                ref.host_ref -= 1
        with self._backup_cv:
            self._backups_in_flight -= 1

    def flush(self: "HierarchicalCache") -> None:
        """Wait (bounded) until every backup begun so far reached host and storage.

        A fixed number of collectives per call, so ranks stay in step.
        """
        self._ensure_usable("flush")
        self._flush()

    def _flush(self: "HierarchicalCache") -> None:
        self.copies.wait()
        self._writing_check()
        timeout = self.config.wait_timeout_s
        with self._backup_cv:
            arrived = self._backup_cv.wait_for(lambda: len(self.backup_acks) >= self._backups_in_flight, timeout)
            missing = self._backups_in_flight - len(self.backup_acks)
        if not arrived:
            raise CacheTimeoutError(f"{self.name} rank {self.rank}: {missing} storage backups not acknowledged within {timeout}s (backup thread held or storage stuck)")
        self._writing_check()

    # --- eviction ------------------------------------------------------------------

    def evict(self: "HierarchicalCache", num_tokens: int) -> int:
        """Free at least `num_tokens` device tokens if possible, least recently used first; returns tokens evicted."""
        self._ensure_usable("evict")
        return self._evict(checked_count("num_tokens", num_tokens))

    def evict_host(self: "HierarchicalCache", num_tokens: int) -> int:
        """Free at least `num_tokens` host tokens if possible (storage keeps its pages); returns tokens evicted."""
        self._ensure_usable("evict_host")
        return self._evict_host(checked_count("num_tokens", num_tokens))

    def _evict(self: "HierarchicalCache", num_tokens: int) -> int:
        if self.config.write_policy == "write_back":
            self._back_up_before_evict()
        return self.tree.evict(num_tokens, on_demote=self._drop_device, on_delete=self._drop_device, can_evict=self._can_evict_device)

    def _evict_host(self: "HierarchicalCache", num_tokens: int) -> int:
        return self.tree.evict_host(num_tokens, on_delete=self._drop_host, can_evict=self._can_evict_host)

    def evict_all(self: "HierarchicalCache") -> None:
        """Empty the device and host tiers (storage keeps its pages)."""
        self._ensure_usable("evict_all")
        self._flush()
        self._evict(self.tree.device_tokens())
        self._evict_host(self.tree.host_tokens())
        self.copies.wait()

    def _back_up_before_evict(self: "HierarchicalCache") -> None:
        started = [self._write_backup(node) for node in self.tree.iter_nodes() if node.lock_ref == 0]
        if any(started):
            self.copies.wait()
            self._writing_check()

    def _can_evict_device(self: "HierarchicalCache", node: TreeNode) -> bool:
        return "pending_write" not in node.ext

    def _can_evict_host(self: "HierarchicalCache", node: TreeNode) -> bool:
        return all(ref.host_ref == 0 for ref in self.states(node).values())

    def _drop_device(self: "HierarchicalCache", node: TreeNode) -> None:
        self.copies.free(DEVICE, "kv", node.value, pools=self.token_pools)
        for pool, ref in self.states(node).items():
            if ref.device is not None:
                self.copies.free(DEVICE, "state", [ref.device], pools=[pool])
                ref.device = None

    def _drop_host(self: "HierarchicalCache", node: TreeNode) -> None:
        self.copies.free(HOST, "kv", node.host_value, pools=self.token_pools)
        for pool, ref in self.states(node).items():
            if ref.host is not None:
                self.copies.free(HOST, "state", [ref.host], pools=[pool])
                ref.host = None

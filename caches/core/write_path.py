"""The write path: device data into the tree, backups to host and storage.

Write policies: write_through backs a node up to host on its first hit,
write_through_selective on its second, write_back only when it is evicted.
Device->host copies are acknowledged in counts every rank agrees on, then the
host copy goes to storage on the backup thread (caches/core/controller.py),
again acknowledged in agreed counts (BackupAcks). A node stays device-pinned
while its copy runs and host-pinned while its storage backup runs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from caches.core.agreed_queue import AgreedQueue
from caches.core.arguments import checked_tokens
from caches.core.controller import BackupJob
from caches.core.copies import CopyRecord
from caches.core.parts import CorePart, CoreParts
from caches.core.reducer import Reducer
from caches.core.slots import KV_GROUP, STATE_GROUP
from caches.core.state import node_states
from caches.core.tree import InsertResult, MatchResult, TreeNode
from caches.core.windows import host_only_windows
from caches.errors import CacheArgumentError, CacheFullError, CacheTimeoutError
from spec.trace import DEVICE, HOST, WRITE_BACK_COPY

HIT_THRESHOLD = {"write_through": 1, "write_through_selective": 2, "write_back": None}
PENDING_KEY = "pending_write"

__all__ = ["BackupAcks", "CacheFullError", "HIT_THRESHOLD", "PendingWrite", "WritePath"]


@dataclass
class PendingWrite:
    """A device->host backup of one node (split into parts if the node was split meanwhile).

    parts: (node, its KV host slots, its window pools' host slots), one per part.
    """

    parts: list[tuple[TreeNode, torch.Tensor, dict[str, torch.Tensor]]]
    locked: TreeNode
    states: dict[str, int]
    records: list[CopyRecord] = field(default_factory=list)

    def done(self) -> bool:
        return all(r.handle.done() and r.ok is not None for r in self.records)

    def ok(self) -> bool:
        return all(r.ok for r in self.records)

    def split(self, head: TreeNode, tail: TreeNode) -> None:
        for index, (node, host, windows) in enumerate(self.parts):
            if node is tail:
                cut = len(head.key)
                self.parts[index : index + 1] = [
                    (head, host[:cut], {pool: w[:cut] for pool, w in windows.items()}),
                    (tail, host[cut:], {pool: w[cut:] for pool, w in windows.items()}),
                ]
                head.ext[PENDING_KEY] = self
                return


class BackupAcks:
    """Storage backups in flight and their acknowledgements (filled by the backup thread)."""

    def __init__(self, reducer: Reducer) -> None:
        self.queue: AgreedQueue[BackupJob] = AgreedQueue(reducer, "backup_ack")
        self.in_flight = 0
        self._cv = threading.Condition()

    def submitted(self) -> None:
        with self._cv:
            self.in_flight += 1

    def arrived(self, job: BackupJob) -> None:
        # Runs on the backup thread: hand the ack to the scheduler, nothing else.
        self.queue.put(job)
        with self._cv:
            self._cv.notify_all()

    def acknowledged(self) -> None:
        with self._cv:
            self.in_flight -= 1

    def wait_all(self, timeout_s: float) -> int:
        """Bounded wait until every backup in flight has arrived; returns how many are still missing."""
        with self._cv:
            self._cv.wait_for(lambda: len(self.queue) >= self.in_flight, timeout_s)
            return max(self.in_flight - len(self.queue), 0)


class WritePath(CorePart):
    def __init__(self, parts: CoreParts, *, reducer: Reducer, acks: BackupAcks, submit_backup: Callable[[BackupJob], None]) -> None:
        super().__init__(parts)
        self.reducer = reducer
        self.acks = acks
        self._submit_backup = submit_backup
        self.pending: list[PendingWrite] = []

    # --- data entering the device tier -------------------------------------------------

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> InsertResult | None:
        """A request finished: its data for the full pages of `tokens` enters the device tier.

        data[token pool]: [>= full-page tokens, *elem_shape]; data[state pool]
        (optional): [1, *elem_shape], the state after the last full page;
        data[window pool] (optional): like a token pool, of which the pool's
        owner keeps the window before the end.
        Everything is checked before a slot is taken: a refused write changes nothing.
        """
        tokens = checked_tokens(tokens)
        count = len(tokens) - len(tokens) % self.page_size
        self._check_write_data(data, count)
        if count == 0:
            return None
        slots = self.slots.alloc(DEVICE, KV_GROUP, count)
        if slots is None:
            raise CacheFullError(f"{self.who}: device tier cannot hold {count} tokens even after eviction")
        states: dict[str, int] = {}
        device = self.pools.device
        try:
            for pool in self.pools.token_pools:
                device[pool].write(slots, data[pool][:count].to(device[pool].torch_device))
            for pool in self.pools.state_pools:
                if pool in data:
                    slot = self.slots.alloc(DEVICE, STATE_GROUP, 1)
                    if slot is None:
                        continue  # no room for the state: the prefix is cached without it
                    states[pool] = int(slot[0])
                    device[pool].write(slot, data[pool].reshape(1, *device[pool].spec.elem_shape).to(device[pool].torch_device))
        except BaseException:
            self.copies.free(DEVICE, KV_GROUP, slots, pools=self.pools.token_pools)
            for pool, slot in states.items():
                self.copies.free(DEVICE, STATE_GROUP, [slot], pools=[pool])
            raise
        windows = {pool: data[pool][:count].to(device[pool].torch_device) for pool in self.hooks.windows if pool in data}
        return self.insert(tokens[:count], slots, states=states, windows=windows)

    def insert(self, tokens: Sequence[int], device_slots: torch.Tensor, *, states: Mapping[str, int] | None = None,
               windows: Mapping[str, torch.Tensor] | None = None) -> InsertResult:
        """Device slots of `tokens` into the tree; windows[pool]: a window pool's rows for every token (its owner keeps the window)."""
        result = self.tree.insert(tokens, device_slots)
        if result.duplicate_slots.numel():
            # F9: freed only once no copy into or out of them is pending.
            self.copies.free(DEVICE, KV_GROUP, result.duplicate_slots, pools=self.pools.token_pools)
        node = result.node
        for pool, slot in (states or {}).items():
            ref = node_states(node).setdefault(pool, self.hooks.new_state_ref())
            if ref.device is None:
                ref.device = slot
            else:
                self.copies.free(DEVICE, STATE_GROUP, [slot], pools=[pool])
        for pool, rows in (windows or {}).items():
            self.hooks.windows[pool].store_write(node, rows)  # may split the path at the window's start
        touched = self.tree.path_to(node)  # every node of the path was walked or added, root first
        for n in touched:
            n.hit_count += 1
        self.back_up_by_policy(touched)
        self.hooks.on_insert(node, with_states=bool(states))
        return result

    def match(self, tokens: Sequence[int]) -> MatchResult:
        """The longest usable match; a hit counts towards write-through of the matched path."""
        full = self.tree.match_prefix(checked_tokens(tokens))
        path = self.tree.path_to(full.device_node)
        for node in path:
            node.hit_count += 1
        self.back_up_by_policy(path)
        match = self.hooks.usable_match(full)
        # F10: a window on the host only is served through load-back, even under device KV; the match says so.
        match.host_window_tokens = {
            pool: sum(len(n.key) for n in nodes) for pool, nodes in host_only_windows(self.hooks.windows, match.host_node).items()
        }
        return match

    def _check_write_data(self, data: Any, count: int) -> None:
        if not isinstance(data, Mapping):
            raise CacheArgumentError("data", type(data).__name__, "a mapping of pool name to tensor")
        for pool in data:
            if pool not in self.pools.device:
                raise CacheArgumentError("data", pool, "pools of this cache: " + ", ".join(self.pools.device))
        for pool in [*self.pools.token_pools, *self.pools.window_pools]:
            spec = self.pools.device[pool].spec
            tensor = data.get(pool)
            if tensor is None and pool in self.pools.window_pools:
                continue  # optional: the prefix is cached without its window
            if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 + len(spec.elem_shape) or tensor.shape[0] < count or tuple(tensor.shape[1:]) != spec.elem_shape or tensor.dtype != spec.dtype:
                got = None if tensor is None else (tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__)
                raise CacheArgumentError(f"data[{pool!r}]", got, f"a {spec.dtype} tensor of shape [>= {count}, {', '.join(map(str, spec.elem_shape))}]")
        for pool in self.pools.state_pools:
            tensor = data.get(pool)
            if tensor is None:
                continue
            spec = self.pools.device[pool].spec
            if not isinstance(tensor, torch.Tensor) or tensor.numel() != spec.bytes_per_slot // spec.dtype.itemsize or tensor.dtype != spec.dtype:
                got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise CacheArgumentError(f"data[{pool!r}]", got, f"a {spec.dtype} tensor of shape [1, {', '.join(map(str, spec.elem_shape))}]")

    # --- device -> host ----------------------------------------------------------

    def writing(self, node: TreeNode) -> bool:
        """A device->host backup of this node is pending (it must stay on the device)."""
        return PENDING_KEY in node.ext

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        pending = tail.ext.get(PENDING_KEY)
        if pending is not None:
            pending.split(head, tail)

    def back_up_by_policy(self, nodes: Sequence[TreeNode]) -> None:
        threshold = HIT_THRESHOLD[self.config.write_policy]
        if threshold is None:
            return
        for node in nodes:
            if node.hit_count >= threshold:
                self.back_up(node)

    def _give_back(self, host: torch.Tensor | None, states: Mapping[str, torch.Tensor | None], windows: Mapping[str, torch.Tensor | None]) -> None:
        """Host slots found for a backup that is not made (or made without these pools): free again at once."""
        if host is not None:
            self.copies.free(HOST, KV_GROUP, host, pools=self.pools.token_pools)
        for pool, slot in states.items():
            if slot is not None:
                self.copies.free(HOST, STATE_GROUP, [int(slot[0])], pools=[pool])
        for pool, slot in windows.items():
            if slot is not None:
                self.copies.free(HOST, pool, slot, pools=[pool])

    def back_up(self, node: TreeNode) -> bool:
        if node is self.tree.root or node.value is None or node.host_value is not None or self.writing(node):
            return False
        parent = node.parent
        if parent is not self.tree.root and parent.host_value is None and not self.writing(parent):
            return False  # backups form a prefix from the root
        state_pools = [pool for pool, ref in node_states(node).items() if ref.device is not None and ref.host is None]
        window_pools = [pool for pool, owner in self.hooks.windows.items()
                        if owner.slots(node, DEVICE) is not None and owner.slots(node, HOST) is None]
        host = self.slots.alloc(HOST, KV_GROUP, len(node.key))
        found_states = {pool: self.slots.alloc(HOST, STATE_GROUP, 1) if host is not None else None for pool in state_pools}
        found_windows = {pool: self.slots.alloc(HOST, pool, len(node.key)) if host is not None else None for pool in window_pools}
        # Every rank backs up alike: room found on some ranks only is given back there. Write acks are agreed by
        # count (writing_check), so a backup on some ranks only would hold the others' acks, and their nodes, forever.
        found = [host, *found_states.values(), *found_windows.values()]
        agreed = self.reducer.all_reduce_min([int(f is not None) for f in found], name="backup_room")
        if not agreed[0]:
            self._give_back(host, found_states, found_windows)
            return False
        states = {pool: int(slot[0]) for (pool, slot), keep in zip(found_states.items(), agreed[1:]) if slot is not None and keep}
        # No room for a window: the node is backed up without it.
        windows = {pool: slot for (pool, slot), keep in zip(found_windows.items(), agreed[1 + len(state_pools):]) if slot is not None and keep}
        self._give_back(None, {p: s for p, s in found_states.items() if p not in states},
                        {p: s for p, s in found_windows.items() if p not in windows})
        self.tree.lock(node)
        pending = PendingWrite(parts=[(node, host, windows)], locked=node, states=states)
        node.ext[PENDING_KEY] = pending
        device, host_pools = self.pools.device, self.pools.host
        for pool in self.pools.token_pools:
            pending.records.append(self.copies.copy(
                pool=pool, group=KV_GROUP, direction=WRITE_BACK_COPY,
                dst=host_pools[pool], dst_slots=host, src=device[pool], src_slots=node.value,
            ))
        for pool, slot in states.items():
            device_slot = node_states(node)[pool].device
            pending.records.append(self.copies.copy(
                pool=pool, group=STATE_GROUP, direction=WRITE_BACK_COPY,
                dst=host_pools[pool], dst_slots=torch.tensor([slot]),
                src=device[pool], src_slots=torch.tensor([device_slot]),
            ))
        for pool, slot in windows.items():
            pending.records.append(self.copies.copy(
                pool=pool, group=pool, direction=WRITE_BACK_COPY,
                dst=host_pools[pool], dst_slots=slot, src=device[pool], src_slots=self.hooks.windows[pool].slots(node, DEVICE),
            ))
        self.pending.append(pending)
        return True

    def back_up_before_evict(self) -> None:
        """write_back: every unlocked node gets its backup before device eviction."""
        started = [self.back_up(node) for node in self.tree.iter_nodes() if node.lock_ref == 0]
        if any(started):
            self.copies.wait()
            self.writing_check()

    def writing_check(self) -> None:
        """Apply finished backups, in counts every rank agrees on."""
        self.copies.poll()
        ready = 0
        for pending in self.pending:
            if not pending.done():
                break
            ready += 1
        take = self.reducer.all_reduce_min([ready], name="write_ack")[0]
        acked, self.pending = self.pending[:take], self.pending[take:]
        for pending in acked:
            self._ack_write(pending)
        for job in self.acks.queue.drain():
            self._ack_backup(job)

    def _ack_write(self, pending: PendingWrite) -> None:
        ok = pending.ok()
        self.tree.unlock(pending.locked)
        backed_up = []
        for node, host, windows in pending.parts:
            node.ext.pop(PENDING_KEY, None)
            parent_ok = node.parent is self.tree.root or node.parent.host_value is not None
            if ok and node.host_value is None and parent_ok:
                self.tree.set_host_value(node, host)
                backed_up.append(node)
            else:
                self.copies.free(HOST, KV_GROUP, host, pools=self.pools.token_pools)
            for pool, slot in windows.items():
                owner = self.hooks.windows[pool]
                if node in backed_up and owner.slots(node, HOST) is None:
                    owner.set_slots(node, HOST, slot)
                else:
                    self.copies.free(HOST, pool, slot, pools=[pool])
        tail = pending.locked
        for pool, slot in pending.states.items():
            ref = node_states(tail).get(pool)
            if ok and ref is not None and ref.host is None and tail.host_value is not None:
                ref.host = slot
            else:
                self.copies.free(HOST, STATE_GROUP, [slot], pools=[pool])
        for node in backed_up:
            self._submit_storage_backup(node)

    # --- host -> storage ------------------------------------------------------------

    def _submit_storage_backup(self, node: TreeNode) -> None:
        slots: dict[str, torch.Tensor] = {pool: node.host_value for pool in self.pools.token_pools}
        per_page = {pool: True for pool in self.pools.token_pools}
        for pool, owner in self.hooks.windows.items():
            window = owner.slots(node, HOST)
            if window is not None:
                slots[pool], per_page[pool] = window, True
        for pool, ref in node_states(node).items():
            if ref.host is not None:
                slots[pool] = torch.tensor([ref.host])
                per_page[pool] = False
                ref.host_ref += 1
        self.tree.pin_host(node)
        self.acks.submitted()
        self._submit_backup(BackupJob(node_id=node.id, hashes=list(node.hash_value), slots=slots, per_page=per_page, node=node))

    def _ack_backup(self, job: BackupJob) -> None:
        node = job.node
        self.tree.unpin_host(node)
        for pool, ref in node_states(node).items():
            if pool in job.slots and ref.host_ref:
                ref.host_ref -= 1
        self.acks.acknowledged()

    def flush(self) -> None:
        """Wait (bounded) until every backup begun so far reached host and storage.

        A fixed number of collectives per call, so ranks stay in step.
        """
        self.copies.wait()
        self.writing_check()
        timeout = self.config.wait_timeout_s
        missing = self.acks.wait_all(timeout)
        if missing:
            raise CacheTimeoutError(f"{self.who}: {missing} storage backups not acknowledged within {timeout}s (backup thread held or storage stuck)")
        self.writing_check()

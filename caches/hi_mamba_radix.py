"""hi_mamba_radix: full KV plus one mamba (recurrent) state per tree node.

A state belongs to one prefix length: the state after a node's last page. So a
cached prefix is usable only up to the deepest matched node that carries a
state (on the device for a device hit, on the host for a host hit); nodes
without one may sit in the middle of the path.

Host states have their own pin (StateRef.host_ref: a storage backup, or a
prefetch hanging below the node) and their own LRU (StateRef.last_access,
logical ticks), so host state slots can be reclaimed without evicting KV
(`evict_mamba_host`).

Owns its prefetch-termination code in the upstream mamba idiom: plain
attribute reads on one locked progress snapshot, and the cross-rank reduce
only when there is more than one rank. Everything else is the shared core.
"""

from __future__ import annotations

from typing import Sequence

import torch

from caches.core.arguments import checked_count
from caches.core.cache_base import STATE_GROUP, HierarchicalCache, StateRef
from caches.core.operation import PoolPlan, PrefetchOperation
from caches.core.tree import InsertResult, MatchResult, TreeNode
from spec.trace import HOST

MAMBA = "mamba"


class HiMambaRadixCache(HierarchicalCache):
    name = "hi_mamba_radix"
    supported_extra_pools = frozenset({MAMBA})
    required_extra_pools = frozenset({MAMBA})

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._state_tick = 0
        # request id -> the anchor's state refs this prefetch pinned on the host
        self._prefetch_state_pins: dict[str, list[StateRef]] = {}

    # --- the termination protocol (this class's own idiom) ----------------------

    def can_terminate_prefetch(self, operation) -> bool:
        progress = operation.progress()  # every field below comes from this one locked snapshot
        timed_out = False

        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, progress, True, timed_out)
            return True

        expected_tokens = len(progress.hash_value) * self.page_size
        kv_complete = expected_tokens > 0 and progress.completed_tokens == expected_tokens
        if kv_complete and progress.pool_transfers_present and not progress.pool_transfers_done:
            # The mamba state lands after KV: not complete until it has.
            kv_complete = False

        vote = False
        if self.prefetch_stop_policy == "wait_complete":
            vote = kv_complete
        elif self.prefetch_stop_policy == "timeout":
            elapsed = self.clock.now() - operation.start_time
            timed_out = elapsed > self._prefetch_budget_s(len(progress.hash_value))
            vote = kv_complete or timed_out

        self._record_vote(operation, progress, vote, timed_out)
        terminated = progress.terminated
        if self.world_size > 1:
            reduced = self.reducer.all_reduce_max(
                [1 - int(vote), int(progress.terminated)],
                name="vote_max",
                op=operation.request_id,
                step=self._step,
            )
            vote = reduced[0] == 0
            terminated = reduced[1] == 1
        # Stop when every rank may stop, or when any rank already stopped.
        vote = vote or terminated
        return vote

    def _prefetch_budget_s(self, hit_pages: int) -> float:
        """Seconds a timeout-policy prefetch may wait: grows with the hit, capped."""
        limits = self.termination
        hit_tokens = hit_pages * self.page_size
        return min(limits.timeout_max_s, limits.timeout_base_s + limits.timeout_per_ki_token_s * hit_tokens / 1024)

    def check_prefetch_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step over the agreed, ordered request ids; returns {id: committed tokens} of finished ones."""
        request_ids = self._checked_request_ids(request_ids)  # one argument rule for every cache
        step = self._begin_step()
        committed: dict[str, int] = {}
        for rid in request_ids:
            op = self.ongoing_prefetch.get(rid)
            if op is None:
                self._join_untracked(rid, step)
                continue
            if not self.can_terminate_prefetch(op):
                continue
            committed[rid] = self._commit_prefetch(op, step)
        return committed

    # --- matching: usable only up to a node that carries the state ----------------

    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        """The core match, cut back to the deepest node whose state is where the hit needs it.

        Host part: the deepest host-only node with a host state ends the match
        (the device part before it is kept whole, load_back brings the state).
        Otherwise the deepest device node with a device state ends it.
        """
        full = super().match_prefix(tokens)
        path = self.tree.path_to(full.host_node)
        end = None
        for node in reversed(path):
            ref = self.states(node).get(MAMBA)
            if ref is None:
                continue
            on_device = node.value is not None
            if (on_device and ref.device is not None) or (not on_device and ref.host is not None):
                end = node
                break
        if end is None:
            end = self.tree.root
        self._touch_states(end)
        if end is full.host_node:
            return full
        depth = self.tree.depth(end)
        if end.value is not None:  # the usable end is on the device: no host hit left
            return MatchResult(
                device_slots=full.device_slots[:depth],
                device_node=end,
                host_node=end,
                host_hit_tokens=0,
                matched_tokens=depth,
                deepest_backed_up_node=full.deepest_backed_up_node,
            )
        device_tokens = full.device_hit_tokens
        return MatchResult(
            device_slots=full.device_slots,
            device_node=full.device_node,
            host_node=end,
            host_hit_tokens=depth - device_tokens,
            matched_tokens=depth,
            deepest_backed_up_node=full.deepest_backed_up_node,
        )

    # --- the state LRU: logical ticks, deeper states older than their ancestors -----

    def _next_state_tick(self) -> int:
        self._state_tick += 1
        return self._state_tick

    def _touch_states(self, end: TreeNode) -> None:
        # The end first, then each ancestor one tick later: on one path, the
        # deepest state is the least recently used, as with leaf-first eviction.
        node = end
        while node is not None:
            ref = self.states(node).get(MAMBA)
            if ref is not None:
                ref.last_access = self._next_state_tick()
            node = node.parent

    def _new_state_ref(self) -> StateRef:
        return StateRef(last_access=self._next_state_tick())

    def insert(self, tokens: Sequence[int], device_slots: torch.Tensor, *, states=None) -> InsertResult:
        result = super().insert(tokens, device_slots, states=states)
        if states:
            ref = self.states(result.node).get(MAMBA)
            if ref is not None:
                ref.last_access = self._next_state_tick()
        return result

    def _attach_prefetched_state(self, op: PrefetchOperation, node: TreeNode, plan: PoolPlan) -> bool:
        # The core attaches only a state loaded for exactly the committed length (F4).
        attached = super()._attach_prefetched_state(op, node, plan)
        if attached:
            self.states(node)[plan.pool].last_access = self._next_state_tick()
        return attached

    # --- host state eviction ----------------------------------------------------------

    def evict_mamba_host(self, num_states: int) -> int:
        """Free up to `num_states` host mamba states, least recently used first; KV stays.

        Skips pinned states (a storage backup or a prefetch below the node) and
        nodes whose host data a copy is reading. A node that loses its host state
        keeps its host KV pages but no longer ends a usable host match.
        Returns the states freed.
        """
        self._ensure_usable("evict_mamba_host")
        return self._evict_mamba_host(checked_count("num_states", num_states))

    def _evict_mamba_host(self, num_states: int) -> int:
        candidates = []
        for node in self.tree.iter_nodes():
            ref = self.states(node).get(MAMBA)
            if ref is None or ref.host is None or ref.host_ref > 0:
                continue
            if self._host_copy_pending(node, ref):
                continue
            candidates.append((ref.last_access, node.id, ref))
        candidates.sort(key=lambda c: (c[0], c[1]))
        freed = 0
        for _, _, ref in candidates[:num_states]:
            self.copies.free(HOST, STATE_GROUP, [ref.host], pools=[MAMBA])
            ref.host = None
            freed += 1
        return freed

    def _host_copy_pending(self, node: TreeNode, ref: StateRef) -> bool:
        kv_busy = node.host_value is not None and self.copies.busy(HOST, "kv", node.host_value.tolist())
        return kv_busy or self.copies.busy(HOST, STATE_GROUP, [ref.host])

    def _evict_host_for(self, group: str, short: int) -> None:
        if group == STATE_GROUP:
            # A state slot is won back from the state LRU, never by evicting host KV.
            self._evict_mamba_host(short)
            return
        super()._evict_host_for(group, short)

    # --- prefetch: the anchor's host state stays while a prefetch hangs below it ------

    def prefetch_from_storage(self, request_id: str, tokens: Sequence[int]) -> int:
        # Should the new leaf's state not arrive, the anchor's state is the
        # fallback end of a usable match: pin it on the host while the prefetch
        # hangs below it, from before the prefetch's own state slot is taken
        # (that allocation may evict host states).
        tokens = self._prefetch_arguments(request_id, tokens)
        anchor = self.tree.match_prefix(tokens).deepest_backed_up_node
        pinned = [ref for ref in self.states(anchor).values() if ref.host is not None]
        for ref in pinned:
            ref.host_ref += 1
        try:
            requested = super().prefetch_from_storage(request_id, tokens)
        except BaseException:
            self._unpin(pinned)
            raise
        if requested:
            assert self.ongoing_prefetch[request_id].last_node is anchor
            self._prefetch_state_pins[request_id] = pinned
        else:
            self._unpin(pinned)
        return requested

    def _finish_prefetch(self, op: PrefetchOperation) -> None:
        self._unpin(self._prefetch_state_pins.pop(op.request_id, []))
        super()._finish_prefetch(op)

    @staticmethod
    def _unpin(refs: list[StateRef]) -> None:
        for ref in refs:
            ref.host_ref -= 1

    # --- load-back: the path's end stays put while its state slot is found -----------

    def _load_back_states(self, last: TreeNode) -> None:
        # Making room for the state slot evicts device nodes; the path just loaded
        # is not locked by the core, and its end must keep the state it receives.
        self.tree.lock(last)
        try:
            super()._load_back_states(last)
        finally:
            self.tree.unlock(last)

"""The commit: what a terminated prefetch puts into the tree, through the spec's fence.

Each cache decides *when* to stop waiting (its own `can_terminate_prefetch`);
*what* may then enter the tree is decided here, once, by the fence
(spec/fence.py): terminate and snapshot under the operation's lock (F1, F2),
clamp to every ALL_PAGES pool (F3), agree the length and the trailing
states and windows across ranks in one MIN collective (S4, F4, F10), insert
only finished slots into the tree (RadixTree.insert_host), and free the rest
now or when their IO ends (F5).
"""

from __future__ import annotations

import torch

from caches.core.operation import PoolPlan, PrefetchOperation, Progress
from caches.core.parts import CorePart, CoreParts
from caches.core.prefetch_path import PrefetchPath
from caches.core.reducer import Reducer
from caches.core.state import node_states
from caches.core.tree import TreeNode
from spec.fence import COMMIT_COLLECTIVE, TRAILING_POLICIES, HitPolicy, commit_payload, committable_pages, read_commit
from spec.trace import HOST, EventKind


class PrefetchCommit(CorePart):
    def __init__(self, parts: CoreParts, *, reducer: Reducer, prefetches: PrefetchPath) -> None:
        super().__init__(parts)
        self.token_pools = parts.pools.token_pools
        self.trailing_pools = parts.pools.trailing_pools  # states and windows, in the commit collective's order
        self.reducer = reducer
        self.prefetches = prefetches

    def commit(self, op: PrefetchOperation, step: int) -> int:
        """Terminate `op` and insert what the fence allows; returns the tokens committed (the same on every rank)."""
        progress = op.terminate(step)  # F1 + F2
        kv_pages = min(progress.completed_tokens // self.page_size, len(progress.hash_value))
        local = committable_pages(kv_pages, progress.pool_progress)  # F3
        loaded_for = {p.name: p.completed_pages for p in progress.pool_progress if p.hit_policy in TRAILING_POLICIES}
        payload = commit_payload(local, [loaded_for.get(pool, 0) for pool in self.trailing_pools])
        decision = read_commit(self.reducer.all_reduce_min(payload, name=COMMIT_COLLECTIVE, op=op.request_id, step=step))
        agreed = decision.pages
        attach = {pool for pool, ok in zip(self.trailing_pools, decision.trailing_attached) if ok}  # F4, F10: on every rank
        tokens = agreed * self.page_size  # one length slices the tokens, the slots and the page keys alike
        kv_slots = op.plan("kv").slots[:tokens]
        keys = list(progress.hash_value[: tokens // self.page_size])
        # What the tree is handed, recorded before it takes it: a shape it refuses is still judged (S5).
        self.trace.record(EventKind.COMMIT, op=op.request_id, step=step, value=tokens, pool="kv", slots=kv_slots.tolist(), keys=keys)
        if agreed:
            self.insert(op, progress, agreed, attach, kv_slots, keys)
        op.release_idle()  # F5: in-flight slots are freed by whoever ends their IO
        self.prefetches.finish(op)
        self.stats.storage_hit_tokens += tokens
        self.stats.prefetches_committed += 1
        return tokens

    def insert(self, op: PrefetchOperation, progress: Progress, pages: int, attach: set[str], kv_slots: torch.Tensor, keys: list[str]) -> TreeNode:
        result = self.tree.insert_host(op.last_node, op.tokens[: len(kv_slots)], kv_slots, keys)
        duplicates = set(result.duplicate_slots.tolist())
        inserted = [s for s in kv_slots.tolist() if s not in duplicates]
        for pool in self.token_pools:
            op.take_for_insert(pool, inserted)
            self.trace.record(EventKind.INSERT, op=op.request_id, pool=pool, space=HOST, slots=inserted)
        if duplicates:
            for pool in self.token_pools:
                op.release(pool, sorted(duplicates))
        node = result.node
        for plan in (p for p in op.pool_transfers if p.hit_policy in TRAILING_POLICIES):  # ALL_PAGES pools went in with KV
            if plan.pool not in attach:
                continue
            if plan.hit_policy is HitPolicy.TRAILING_WINDOW:
                self.attach_window(op, node, plan, pages)
            else:
                self.attach_state(op, node, plan)
        self.hooks.on_prefetch_insert(node)
        return node

    def attach_window(self, op: PrefetchOperation, end: TreeNode, plan: PoolPlan, pages: int) -> None:
        """F10: the whole window, loaded for exactly these pages on every rank, goes to the nodes before `end`'s end."""
        count = plan.trailing_pages(self.page_size, pages) * self.page_size
        taken = self.hooks.windows[plan.pool].attach(end, plan.slots[:count].tolist())
        if taken:
            op.take_for_insert(plan.pool, taken)
            self.trace.record(EventKind.INSERT, op=op.request_id, pool=plan.pool, space=HOST, slots=taken)

    def attach_state(self, op: PrefetchOperation, node: TreeNode, plan: PoolPlan) -> bool:
        ref = node_states(node).setdefault(plan.pool, self.hooks.new_state_ref())
        if ref.host is not None or node.host_value is None:
            return False  # the node already carries a state: ours is released with the rest
        slot = int(plan.slots[0])
        op.take_for_insert(plan.pool, [slot])
        self.trace.record(EventKind.INSERT, op=op.request_id, pool=plan.pool, space=HOST, slots=[slot])
        ref.host = slot
        self.hooks.on_state_attached(node, plan.pool)
        return True

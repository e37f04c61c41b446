"""HC108: in the ACK-drain shape, sidecar results committed or released without the done check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from lint.findings import Finding
from lint.rules.base import EXAMPLE_PATH, Invalid, MethodRule, Table, Valid

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

# Hand-written in the shape of SGLang's 0.5.2x UnifiedRadixCache (no HiRadixCache
# there): the decision votes only the timeout; check_prefetch_progress terminates
# and hands the result to _handle_prefetch_result, which owns
# host_indices[:completed_tokens] and the sidecar hits only when
# pool_transfers_done; the ACK drain MIN-reduces what every rank finished.
ACK_DRAIN = '''
import torch


class UnifiedRadixCache:
    def _can_terminate_prefetch(self, operation):
        return self._prefetch_timed_out(operation)

    def check_prefetch_progress(self, req_id):
        operation = self.ongoing_prefetch[req_id]
        should_terminate = operation.is_terminated() or self._can_terminate_prefetch(operation)
        if not should_terminate:
            return False
        self.cache_controller.terminate_prefetch(operation)
        if operation.host_indices is None:
            self._revoke_prefetch(req_id)
        else:
            self._handle_prefetch_result(operation)
        return True

    def _handle_prefetch_result(self, operation):
        tokens = operation.completed_tokens
        kv_slots = operation.host_indices[:tokens]
        hits = {}
        if operation.pool_transfers_done:
            for transfer in operation.pool_transfers:
                hits[transfer.pool] = transfer.host_indices[: transfer.completed_pages]
        inserted = self._insert_host(operation.last_node, operation.token_ids[:tokens], kv_slots, hits)
        self.host_pool.free(kv_slots[inserted:])
        self.host_pool.free(operation.host_indices[tokens:])

    def _drain_prefetch_acks(self):
        finished = [op for op in self.ack_queue if op.io_finished()]
        agreed = torch.tensor([len(finished)], dtype=torch.int)
        torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MIN, group=self.tp_group)
        for operation in finished[: agreed.item()]:
            self.ack_queue.remove(operation)
            if not operation.pool_transfers_done:
                continue  # the sidecar reads are still running: their slots stay owned
            for transfer in operation.pool_transfers:
                self.sidecar_pool(transfer.pool).free(transfer.unused_slots())
'''

# SGLang 0.5.23's ownership: when pool_transfers_done the commit owns the sidecar;
# when not, the drain releases it at the final ACK (its IO has ended); an
# operation whose hit was never allocated ran no read and is released at once.
FINAL_ACK = '''
class UnifiedRadixCache:
    def _can_terminate_prefetch(self, operation):
        return self._prefetch_timed_out(operation)

    def _drain_control_queues(self, agreed):
        def drain_prefetch_acks():
            for ack in self.ack_queue.take(agreed):
                operation = ack.operation
                if ack.completed_req:
                    self.release(operation.host_indices[operation.completed_tokens:],
                                 operation.pool_transfers if not operation.pool_transfers_done else None)

        drain_prefetch_acks()

    def abort(self, operation):
        if operation.host_indices is None:
            self.release(None, operation.pool_transfers)
            return
        self.release(operation.host_indices, operation.pool_transfers if operation.pool_transfers_done else None)
'''

# The flag says every pool transfer ended: the drain may set it only when the
# pool get's own ACK (its hits) has arrived.
POOL_ACK = '''
class UnifiedRadixCache:
    def _can_terminate_prefetch(self, operation):
        return self._prefetch_timed_out(operation)

    def _drain_control_queues(self, agreed):
        for ack in self.ack_queue.take(agreed):
            operation = ack.operation
            if ack.pool_hits is not None:
                operation.pool_hit_pages.update(ack.pool_hits)
                operation.pool_transfers_done = True
            if ack.completed_req and operation.pool_transfers_done:
                self.commit(operation, operation.pool_transfers)
'''

POOL_ACK_CONFIG: Table = {"implementations": [{
    "method": f"{EXAMPLE_PATH}::UnifiedRadixCache._can_terminate_prefetch",
    "guard": "commit",
    "commit": ["_drain_control_queues"],
}]}

FINAL_ACK_CONFIG: Table = {"implementations": [{
    "method": f"{EXAMPLE_PATH}::UnifiedRadixCache._can_terminate_prefetch",
    "guard": "commit",
    "commit": ["_drain_control_queues", "abort"],
}]}

ACK_DRAIN_CONFIG: Table = {"implementations": [{
    "method": f"{EXAMPLE_PATH}::UnifiedRadixCache._can_terminate_prefetch",
    "guard": "commit",
    "commit": ["_handle_prefetch_result", "_drain_prefetch_acks"],
}]}


class SidecarCommitGuard(MethodRule):
    """Where the configuration puts the pool-transfer check in the commit path
    (`guard = "commit"`, as in SGLang's 0.5.2x UnifiedRadixCache, whose
    decision votes only the timeout), every sidecar result the commit path
    (the commit methods, and the same-class helpers and nested functions they
    call) inserts into the tree or releases to a pool must be handed on in a
    state where no read of it can still run: once `pool_transfers_done`
    holds (the commit owns it), at the final ACK on the not-done side (the
    operation's IO has ended; the drain owns it), or before the operation's
    hit was allocated (no read ran). Inserting a sidecar hit whose read is
    still running pairs KV with half-written pages, and releasing its slots
    lets the read write into memory someone else now owns (the use-after-free
    of sglang PR #31668). The flag itself may turn true only where every pool
    transfer has ended (a `pools-ended` signal: the pool get's ACK carries
    its hits). Sidecars taken by unpacking a stored record (`*_, comp_xfers =
    info`) are followed by name. Reported at each such place, or once when no
    commit method checks the flag at all. With no configuration, a decision
    method that never reads completion, in a class that defines one of
    `commit-methods`, is checked this way."""

    code = "HC108"
    name = "sidecar-commit-guard"
    summary = "sidecar results committed or released while their reads may still run"
    clauses = ("F5", "F3")

    VALID = (Valid(ACK_DRAIN, ACK_DRAIN_CONFIG), Valid(FINAL_ACK, FINAL_ACK_CONFIG), Valid(POOL_ACK, POOL_ACK_CONFIG),
             # nothing configured: the defaults recognize the ACK drain by its commit methods
             Valid(ACK_DRAIN.replace("_drain_prefetch_acks", "_drain_storage_control_queues_impl")))
    INVALID = (
        # sidecar hits inserted whatever the state of their reads
        Invalid(ACK_DRAIN.replace(
            "        if operation.pool_transfers_done:\n"
            "            for transfer in operation.pool_transfers:\n"
            "                hits[transfer.pool] = transfer.host_indices[: transfer.completed_pages]\n",
            "        for transfer in operation.pool_transfers:\n"
            "            hits[transfer.pool] = transfer.host_indices[: transfer.completed_pages]\n"),
            line=26, message="('pool_transfers') outside a pool_transfers_done check", config=ACK_DRAIN_CONFIG),
        # the drain frees sidecar slots while their reads may still run
        Invalid(ACK_DRAIN.replace(
            "            if not operation.pool_transfers_done:\n"
            "                continue  # the sidecar reads are still running: their slots stay owned\n", ""),
            line=39, config=ACK_DRAIN_CONFIG),
        # through a helper of the same class
        Invalid(ACK_DRAIN.replace(
            "        hits = {}\n"
            "        if operation.pool_transfers_done:\n"
            "            for transfer in operation.pool_transfers:\n"
            "                hits[transfer.pool] = transfer.host_indices[: transfer.completed_pages]\n",
            "        hits = self._sidecar_hits(operation)\n") + '''
    def _sidecar_hits(self, operation):
        return {t.pool: t.host_indices[: t.completed_pages] for t in operation.pool_transfers}
''', line=41, message="(through _sidecar_hits, called at line 24)", config=ACK_DRAIN_CONFIG),
        # nothing in the commit path looks at the flag
        Invalid(ACK_DRAIN.replace("        if operation.pool_transfers_done:\n", "        if operation.hash_value:\n")
                .replace("            if not operation.pool_transfers_done:\n", "            if not operation.revoked:\n"),
                line=21, message="none of", config=ACK_DRAIN_CONFIG),
        # the final ACK releases the sidecar even when the commit owns it
        Invalid(FINAL_ACK.replace("operation.pool_transfers if not operation.pool_transfers_done else None",
                                  "operation.pool_transfers"),
                line=12, message="(through drain_prefetch_acks, called at line 14) commits or releases sidecar results "
                                 "('pool_transfers') at the final ACK", config=FINAL_ACK_CONFIG),
        # an abort releases the sidecar of an operation whose read may be running
        Invalid(FINAL_ACK.replace("if operation.host_indices is None:", "if operation.revoked:"),
                line=18, config=FINAL_ACK_CONFIG),
        # the flag turns true with any ACK, before the pool get's hits are in
        Invalid(POOL_ACK.replace("            if ack.pool_hits is not None:\n", "            if ack.completed_tokens:\n"),
                line=11, message="sets pool_transfers_done to True where no test shows", config=POOL_ACK_CONFIG),
    )

    def check(self, method: "MethodAnalysis") -> Iterable[Finding]:
        path = method.commit
        if path is None or not path.methods:
            return
        cls = method.site.class_qualname
        if not path.checks_done:
            first = path.methods[0]
            line = path.sites[first].def_line
            yield self._finding(method, cls, first, line, method.column_of_line(line),
                                f"none of {', '.join(f'{cls}.{n}' for n in path.methods)} checks "
                                f"{method.flag}, where the configuration puts the check: sidecar results "
                                f"are committed or released whatever the state of their reads")
            return
        for use in path.unguarded:
            through = f" (through {use.where}, called at line {use.called_at})" if use.where else ""
            what = (f"sets {use.what}" if use.sets_flag
                    else f"commits or releases sidecar results ('{use.what}')")
            yield self._finding(method, cls, use.method, use.line, use.col,
                                f"{cls}.{use.method}{through} {what} {use.why}")

    def _finding(self, method: "MethodAnalysis", cls: str, name: str, line: int, col: int, message: str) -> Finding:
        assert method.commit is not None
        return Finding(method.path, line, col, self.code, message, f"{cls}.{name}", method.commit.sites[name].def_line)

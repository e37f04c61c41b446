"""What a live SGLang tree's own code says about its architecture and its deployment, as file:line evidence.

The live adapter declares a profile (spec/profiles.py) and which scenario
preconditions (spec/preconditions.py) the deployment produces only where the
tree's source says so: each declaration is found by patterns over the user's
tree at run time (nothing of it is copied here) and carries the file and line
it was read at. A pattern that matches nothing leaves the declaration out, and
the harness then judges the class by the spec's defaults: a refactor upstream
can make the suite stricter, never blind.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from conformance.live.layout import Layout
from conformance.live.layouts import CLASS_FILES
from conformance.live.tree import SglangTree, parse_option
from conformance.scenarios.schedule_model import EXTRAS_WITH_EACH_BATCH


@dataclass(frozen=True)
class Hit:
    path: Path
    line: int
    text: str

    def cite(self, tree: SglangTree, why: str) -> str:
        """'<path under what the user gave>:<line>: why (`source`)'."""
        given = parse_option(tree.given)[0].resolve()
        base = given if given in self.path.parents else tree.import_root
        return f"{self.path.relative_to(base)}:{self.line}: {why} (`{self.text}`)"


def _lines(tree: SglangTree, rel: str) -> tuple[str, ...]:
    path = tree.package / rel
    if not path.is_file():
        return ()
    stat = path.stat()
    return _read_lines(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _read_lines(path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """A file's lines, read once while it stays unchanged: every lookup for a tree's adapters reads the same few files."""
    return tuple(path.read_text(encoding="utf-8", errors="replace").splitlines())


def find_all(tree: SglangTree, rel: str, pattern: str, *, within: str | None = None) -> list[Hit]:
    """Every line of sglang/<rel> matching `pattern` (a regex), inside the def or class named `within` when given (a
    regex over the name: a class upstream spelled two ways, as it renamed NSA to DSA)."""
    lines = _lines(tree, rel)
    start, end = 0, len(lines)
    if within is not None:
        head = next((i for i, line in enumerate(lines) if re.match(rf"\s*(?:def|class) (?:{within})\b", line)), None)
        if head is None:
            return []
        indent = len(lines[head]) - len(lines[head].lstrip())
        end = next((i for i in range(head + 1, len(lines))
                    if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent and not lines[i].lstrip().startswith((")", "#"))),
                   len(lines))
        start = head
    return [Hit(tree.package / rel, number + 1, lines[number].strip()[:120]) for number in range(start, end) if re.search(pattern, lines[number])]


def find(tree: SglangTree, rel: str, pattern: str, *, within: str | None = None) -> Hit | None:
    """The first line of sglang/<rel> matching `pattern` (a regex), inside the def or class named `within` when given."""
    hits = find_all(tree, rel, pattern, within=within)
    return hits[0] if hits else None


SCHEDULER = "srt/managers/scheduler.py"
RECEIVER = "srt/managers/scheduler_components/request_receiver.py"
STORAGE = "srt/mem_cache/hicache_storage.py"
CONTROLLER = "srt/managers/cache_controller.py"
HYBRID_CONTROLLER = "srt/mem_cache/hybrid_cache/hybrid_cache_controller.py"


def profile_of(tree: SglangTree, class_name: str) -> tuple[str | None, tuple[str, ...]]:
    """(profile id, evidence) the class's own code shows; (None, ()) when no architecture's marks are found."""
    module = CLASS_FILES[class_name]
    drain_vote = find(tree, module, r"prefetch_stop_policy == \"wait_complete\"", within="_can_terminate_prefetch")
    drain_false = find(tree, module, r"^\s*return False\b", within="_can_terminate_prefetch")
    drain = find(tree, module, r"def _drain_storage_control_queues_impl\b")
    sync = find(tree, HYBRID_CONTROLLER, r"ReduceOp\.MIN", within="_reduce_prefetch_ack") or find(tree, CONTROLLER, r"ReduceOp\.MIN", within="_reduce_prefetch_ack")
    # Where the timeout's timer starts is A3's to judge, not a mark of the architecture (0.5.22 times from start_time).
    timer = find(tree, module, r"observe\(ready=False\)", within="_start_storage_prefetch_wait")
    if drain_vote and drain_false and drain and sync:
        return "ack_drain", (
            drain_false.cite(tree, f"{class_name}._can_terminate_prefetch never votes yes under wait_complete"),
            drain.cite(tree, "completion is committed by the scheduler's ACK drain"),
            sync.cite(tree, "a sync thread MIN-reduces each progress ACK across ranks"),
            *([timer.cite(tree, "the timeout's timer starts at the first check that finds the prefetch unfinished")] if timer else []),
        )
    vote = find(tree, module, r"def can_terminate_prefetch\b")
    reduce = find(tree, module, r"all_reduce", within="can_terminate_prefetch")
    policy_false = find(tree, module, r"^\s*return False\b", within="can_terminate_prefetch")
    check_max = find(tree, module, r"ReduceOp\.MAX", within="check_prefetch_progress")
    if vote and not reduce and policy_false and check_max and drain and sync:
        return "drain_vote", (
            policy_false.cite(tree, f"{class_name}.can_terminate_prefetch decides the policy alone, never yes under wait_complete"),
            check_max.cite(tree, "check_prefetch_progress MAX-reduces [terminated or vote] across ranks"),
            drain.cite(tree, "completion is committed by the scheduler's ACK drain"),
            sync.cite(tree, "a sync thread MIN-reduces each progress ACK across ranks"),
        )
    if vote and reduce:
        op, _ = vote_reduce_of(tree, class_name)
        return "vote_per_check", (
            vote.cite(tree, f"{class_name}.can_terminate_prefetch casts each check's vote"),
            reduce.cite(tree, f"one {op or 'MAX'} all-reduce agrees it across ranks"),
        )
    return None, ()


def vote_reduce_of(tree: SglangTree, class_name: str) -> tuple[str | None, Hit | None]:
    """The reduce op can_terminate_prefetch agrees the vote with ('MAX' of [1 - vote, terminated]; before 2025-09-08 'MIN'
    of [vote]), and its line; (None, None) where it reduces nothing itself."""
    hit = find(tree, CLASS_FILES[class_name], r"ReduceOp\.(MIN|MAX)\b", within="can_terminate_prefetch")
    return (re.search(r"ReduceOp\.(MIN|MAX)\b", hit.text).group(1), hit) if hit else (None, None)


# A number the class's own __init__ sets its prefetch threshold to (tokens): no setting of a user's reaches it.
FIXED_THRESHOLD = r"^\s*self\.prefetch_threshold\s*=\s*(\d+)\s*(#.*)?$"


def fixed_threshold_of(tree: SglangTree, class_name: str) -> Hit | None:
    """The line where the class hard-codes its prefetch threshold, or None where a setting supplies it."""
    return find(tree, CLASS_FILES[class_name], FIXED_THRESHOLD, within=class_name)


FIXED_TIMEOUT = r"^\s*self\.prefetch_timeout\s*=\s*(\d+(?:\.\d+)?)\s*(#.*)?$"


def fixed_timeout_of(tree: SglangTree, class_name: str) -> tuple[float | None, Hit | None]:
    """(seconds, line) where the class hard-codes its prefetch timeout (its budget whatever a user sets), else (None, None)."""
    hit = find(tree, CLASS_FILES[class_name], FIXED_TIMEOUT, within=class_name)
    return (float(re.search(FIXED_TIMEOUT, hit.text).group(1)), hit) if hit else (None, None)


def io_thread_barrier_of(tree: SglangTree) -> Hit | None:
    """A collective the IO thread enters after each transfer, before its release (before 2025-09: a barrier of every
    rank's IO threads), or None."""
    return find(tree, CONTROLLER, r"torch\.distributed\.barrier\(", within="prefetch_io_aux_func")


def fixed_batch_of(tree: SglangTree) -> Hit | None:
    """The batch _page_transfer fixes for the file backend (its last `batch_size = N`, the generic get's branch), or None
    where the controller's storage_batch_size sets it."""
    hits = find_all(tree, CONTROLLER, r"^\s*batch_size\s*=\s*\d+\s*$", within="_page_transfer")
    return hits[-1] if hits else None


def deployment_of(tree: SglangTree) -> Mapping[str, tuple[bool, tuple[str, ...]]]:
    """Which scenario preconditions the tree's scheduler and storage produce, each with the lines that say so."""
    out: dict[str, tuple[bool, tuple[str, ...]]] = {}
    # The request receiver's own method (2026-03 on), or, before it, the scheduler's recv_requests broadcasting what rank 0 read.
    broadcast = (find(tree, RECEIVER, r"_broadcast_reqs_across_ranks\(", within="recv_requests")
                 or find(tree, SCHEDULER, r"\brecv_reqs = broadcast_pyobj\(", within="recv_requests"))
    if broadcast:
        out["abort_on_one_rank"] = (False, (broadcast.cite(tree, "the scheduler receives every request, aborts included, on one rank and "
                                                                 "broadcasts it to the others in the same iteration"),))
    local_clock = find(tree, SCHEDULER, r"time\.perf_counter\(\)", within="_abort_on_waiting_timeout")
    local_release = find(tree, SCHEDULER, r"release_aborted_request\(", within="_abort_on_waiting_timeout")
    agreed = find(tree, SCHEDULER, r"_poll_timeout_aborts\(\)", within="ingest_requests")
    opt_in = find(tree, SCHEDULER, r"SGLANG_REQ_WAITING_TIMEOUT", within="_abort_on_waiting_timeout")
    releases = find_all(tree, SCHEDULER, r"release_aborted_request\(")
    on_request = find_all(tree, SCHEDULER, r"release_aborted_request\(", within="abort_request")
    handler = find(tree, SCHEDULER, r"def abort_request\(")
    if local_clock and local_release:
        out["rank_local_abort_clock"] = (True, (
            *([opt_in.cite(tree, "opt-in: only a deployment that sets SGLANG_REQ_WAITING_TIMEOUT above 0 aborts on the "
                                 "waiting timeout (off by default)")] if opt_in else []),
            local_clock.cite(tree, "each rank compares its own clock with the waiting timeout"),
            local_release.cite(tree, "and releases the request's prefetch at once, without agreeing the abort across ranks"),
        ))
    elif agreed:
        out["rank_local_abort_clock"] = (False, (agreed.cite(tree, "timeout aborts are polled on one rank and enter the broadcast input, "
                                                                   "so every rank drops the same requests in the same iteration"),))
    elif broadcast and handler and len(on_request) == len(releases):
        # No waiting-timeout abort: the scheduler acts on an abort only as an AbortReq it received (and, from 2025-09-02,
        # releases the prefetch there); before release_aborted_request it tells the cache nothing at all.
        first = (on_request[0].cite(tree, "the scheduler releases an aborted request's prefetch only in abort_request, for an abort "
                                          "it received, never on a clock of its own") if on_request else
                 handler.cite(tree, "the scheduler aborts a request only in abort_request, for an abort it received, never on a clock "
                                    "of its own, and tells the cache nothing of it"))
        out["rank_local_abort_clock"] = (False, (first, broadcast.cite(tree, "and every rank receives that abort in the same iteration")))
    room = host_room_sizing_of(tree)
    if room:
        out["rank_local_host_room"] = (False, room)
    shared = find(tree, STORAGE, r"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
    default_dir = find(tree, STORAGE, r"file_path: str = \"/tmp/hicache\"")
    unnamed = find(tree, STORAGE, r"TODO: Include KV dtype and stored layout in keys")
    if shared:
        out["shared_storage_across_configs"] = (True, (
            *([unnamed.cite(tree, "upstream's own TODO: the keys name neither the KV dtype nor the stored layout, and a raw page "
                                  "file does not describe its format")] if unnamed else []),
            shared.cite(tree, "HiCacheFile's directory is a deployment setting any server of the model may share"
                              + (", and by default one directory (/tmp/hicache) for every server on the machine, kept across "
                                 "restarts, whatever KV dtype or host layout each runs with" if default_dir else "")),
        ))
    return out


HOST_POOL_FILES = ("srt/mem_cache/pool_host/base.py", "srt/mem_cache/memory_pool_host.py")  # 0.5.19 on; the fork and before
DEVICE_SIZING_FILES = ("srt/model_executor/model_runner_components/kv_pool_runtime.py", "srt/model_executor/model_runner_kv_cache_mixin.py",
                       "srt/model_executor/model_runner.py")


def host_room_sizing_of(tree: SglangTree) -> tuple[str, ...]:
    """The lines that size every rank's host tier alike, or () where one of them is not found.

    The host tier is the device pool's size times a ratio (or a fixed size in bytes over the same per-token bytes on
    every tensor-parallel rank), and the device pool is sized from the least free memory of any rank. Past sizing,
    host slots move only where the scheduler's tree, the same on every rank, decides: whether ranks ever differ in host
    room is a matter of sizing.
    """
    ratio = next((hit for rel in HOST_POOL_FILES
                  for hit in [find(tree, rel, r"self\.size = int\((?:device_pool\.size|device_capacity\w*) \* host_to_device_ratio\)")] if hit), None)
    least = find(tree, "srt/utils/common.py", r"When distributed is True, the available memory is the minimum")
    measured = next((hit for rel in DEVICE_SIZING_FILES
                     for hit in [find(tree, rel, r"distributed=get_\w+\(\)\.\w*world_size > 1")] if hit), None)
    if not (ratio and least and measured):
        return ()
    return (ratio.cite(tree, "every rank sizes its host tier from its device pool's size and the same ratio"),
            measured.cite(tree, "each rank sizes its device pool from the memory it measures across every rank"),
            least.cite(tree, "that is, from the least free memory of any rank, so every rank's pools are the same size, and host "
                             "slots then move only as the scheduler's tree, the same on every rank, decides"))


def page_size_of(tree: SglangTree, layout: Layout) -> tuple[int | None, tuple[str, ...]]:
    """(the page size the layout's build demands, evidence); (None, ()) where the layout fixes none or the line is not found."""
    rule = layout.page_size_rule
    if rule is None:
        return None, ()
    for hit in find_all(tree, rule.file, rule.pattern, within=rule.within):
        if not _in_branch(tree, rule.file, hit.line, rule.other_platform):
            size = int(re.search(rule.pattern, hit.text).group(1))
            return size, (hit.cite(tree, f"{rule.why}: the build runs at {size}-token pages"),)
    return None, ()


def io_order_of(tree: SglangTree, layout: Layout) -> tuple[str | None, tuple[str, ...]]:
    """(the IO order the layout's build loads a prefetch in, evidence); (None, ()) where the rule is absent or its line is
    not found: the harness's default order."""
    rule = layout.io_order_rule
    hit = find(tree, rule.file, rule.pattern, within=rule.within) if rule is not None else None
    if hit is None:
        return None, ()
    return EXTRAS_WITH_EACH_BATCH, (hit.cite(tree, f"{rule.why}: each KV batch's sidecar pages load beside it"),)


def host_layout_of(tree: SglangTree, layout: Layout) -> tuple[str | None, tuple[str, ...]]:
    """(the host memory layout the layout's build demands, evidence); (None, ()) where it fixes none or the line is not found."""
    rule = layout.host_layout_rule
    hit = find(tree, rule.file, rule.pattern, within=rule.within) if rule is not None else None
    if hit is None:
        return None, ()
    name = next(group for group in re.search(rule.pattern, hit.text).groups() if group is not None)
    return name, (hit.cite(tree, f"{rule.why}: the build runs with hicache_mem_layout={name}"),)


def _in_branch(tree: SglangTree, rel: str, line: int, header: str) -> bool:
    """Whether the line sits, at any depth, in the body of a branch whose header matches `header` (each less-indented
    line above it opens one enclosing block, out to the top level)."""
    lines = _lines(tree, rel)
    text = lines[line - 1]
    indent = len(text) - len(text.lstrip())
    for above in reversed(lines[: line - 1]):
        depth = len(above) - len(above.lstrip())
        if above.strip() and depth < indent:
            if re.search(header, above) is not None:
                return True
            indent = depth
    return False


# Spec-named timeout fields -> the storage backend's extra-config keys a user of upstream sets them with.
EXTRA_CONFIG_KEYS = {"timeout_base_s": "prefetch_timeout_base", "timeout_per_ki_token_s": "prefetch_timeout_per_ki_token",
                     "timeout_max_s": "prefetch_timeout_max"}
PARSER = r"def _?parse_storage_backend_extra_config\b"


def ignored_fields(tree: SglangTree, layout: Layout) -> Mapping[str, tuple[str, ...]]:
    """Spec fields whose extra-config key the layout's parser never reads, each with the lines that say so.

    The parser is the class module's own where it has one, else the controller's it builds on. A key it
    does not pop stays in the extra config handed on to the storage backend: accepted, and ignored.
    """
    for rel in (layout.module_file, HYBRID_CONTROLLER, CONTROLLER):
        head = find(tree, rel, PARSER)
        name = head and re.search(r"def (\w+)", head.text)
        if not name or not find(tree, rel, r"[\"']prefetch_timeout_base[\"']", within=name.group(1)):
            continue
        read = [key for key in EXTRA_CONFIG_KEYS.values() if find(tree, rel, rf"[\"']{key}[\"']", within=name.group(1))]
        return {spec: (head.cite(tree, f"{name.group(1)} reads {', '.join(read)} and never {key}: a {key} a user sets is accepted "
                                       "and handed on, unread, with the rest of the extra config"),)
                for spec, key in EXTRA_CONFIG_KEYS.items() if key not in read}
    _, fixed = fixed_timeout_of(tree, layout.class_name)
    if fixed is not None:  # no parser reads a timeout key: the budget is the class's constant
        return {spec: (fixed.cite(tree, f"{layout.class_name}.__init__ fixes its prefetch timeout and nothing parses the extra "
                                        f"config's {key}: accepted and handed on, unread, to the storage backend"),)
                for spec, key in EXTRA_CONFIG_KEYS.items()}
    return {}


def layout_deployment(tree: SglangTree, layout: Layout) -> Mapping[str, tuple[bool, tuple[str, ...]]]:
    """Preconditions a layout's own build decides (beyond the tree's scheduler and storage), each with the lines that say so."""
    out: dict[str, tuple[bool, tuple[str, ...]]] = {}
    if layout.kv_rank_replicated:
        # The fork and 0.5.19/0.5.20 spell the rule in the controller's backup_skip; 0.5.2x in the storage config's writer.
        skip = (find(tree, CONTROLLER, r"and self\.storage_config\.tp_rank != 0")
                or find(tree, STORAGE, r"return not self\.is_mla_model or self\.tp_rank ==", within="is_storage_writer"))
        if skip:
            out["rank_local_backups"] = (False, (skip.cite(tree, "an MLA model's KV is the same on every TP rank and only one rank backs "
                                                                "it up, so every rank reads that one copy, so no rank's storage lacks a page its peers' holds"),))
    return out

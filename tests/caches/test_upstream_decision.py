"""The upstream-decision shim on hand-written SGLang-shaped checkouts (tests/sglang_checkouts).

Run through the shim, each class's decision must be exactly what
spec/upstream.py says its shape decides, row by row of the decision table,
with the vote recorded as upstream cast it; names the shim does not map are
one error before anything runs; a class the checkout lacks is reported.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from caches.upstream_decision import sglang_adapters
from caches.upstream_decision.names import GLOBAL_NAMES, MEM_CACHE_DIR, OPERATION_NAMES, SELF_NAMES
from caches.upstream_decision.shim import ShimError
from caches.upstream_decision.source import ClassUnavailable, UnmappedName, extract
from conformance.adapter import CacheEnv
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import DecisionState, enumerate_states
from spec.errors import ConfigError
from spec.timeout import timeout_budget
from spec.trace import EventKind, TraceRecorder
from spec.upstream import GuardShape, upstream_decision, upstream_vote

REPO = Path(__file__).resolve().parents[2]
CHECKOUTS = REPO / "tests" / "sglang_checkouts"
FIXED, PRE_FIX = CHECKOUTS / "fixed", CHECKOUTS / "pre_fix"
PAGE_SIZE = 4
TIMEOUTS = dict(timeout_base_s=2.0, timeout_per_ki_token_s=0.5, timeout_max_s=30.0)


def adapter(checkout: Path, key: str):
    adapters, missing = sglang_adapters(checkout)
    assert not missing, missing
    return next(a for a in adapters if a.key == key)


@pytest.fixture
def session(tmp_path):
    """session(checkout, key, policy) -> (cache session, trace, clock); closed at teardown."""
    opened = []

    def make(checkout: Path, key: str, policy: str):
        clock = ManualClock(1000.0)
        trace = TraceRecorder(clock)
        a = adapter(checkout, key)
        env = CacheEnv(device="cpu", termination=TerminationConfig(policy=policy, page_size=PAGE_SIZE, **TIMEOUTS),
                       storage_dir=tmp_path / f"{key}-{policy}", clock=clock, trace=trace, extra_pools=a.default_extra_pools)
        cache = a.create(env)
        opened.append(cache)
        return cache, trace, clock

    yield make
    for cache in opened:
        cache.close()


def test_extract_reaches_the_decision_and_its_helpers_only():
    hiradix = extract(FIXED, "hiradix")
    assert list(hiradix.methods) == ["can_terminate_prefetch", "_all_reduce_attn_groups", "_prefetch_timeout_check_linear_func"]
    assert hiradix.aliases == {"is_prefetch_timeout": "_prefetch_timeout_check_linear_func"}
    assert hiradix.timeout_helpers == {"_prefetch_timeout_check_linear_func"}
    # check_prefetch_progress reads names the shim does not map: it is never reached, so never checked.
    assert "check_prefetch_progress" not in hiradix.methods
    hi_mamba = extract(FIXED, "hi_mamba_radix")
    assert list(hi_mamba.methods) == ["can_terminate_prefetch", "_prefetch_timeout_check_linear_func"]
    unified = extract(FIXED, "unified_radix")
    assert "_apply_storage_runtime_config" not in unified.methods and unified.aliases == {}


SHAPES = [
    (FIXED, "hiradix", GuardShape.VOTE_FORCING),
    (FIXED, "unified_radix", GuardShape.VOTE_FORCING),
    (FIXED, "hi_mamba_radix", GuardShape.VOTE_FORCING),
    (PRE_FIX, "hiradix", GuardShape.NO_GUARD),
]


@pytest.mark.parametrize("checkout, key, shape", SHAPES, ids=[f"{c.name}-{k}" for c, k, _ in SHAPES])
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_every_table_row_decides_and_votes_as_the_upstream_model(session, checkout, key, shape, policy):
    cache, trace, clock = session(checkout, key, policy)
    config = TerminationConfig(policy=policy, page_size=PAGE_SIZE, **TIMEOUTS)
    wrong = []
    for state in (s for s in enumerate_states(PAGE_SIZE) if s.policy.value == policy):
        start = clock.now() - timeout_budget(config, state.hit_pages) - 1.0 if state.timed_out else clock.now()
        mark = len(trace.events())
        decided = cache.can_terminate(cache.make_operation(state, start_time=start))
        votes = [e for e in trace.events()[mark:] if e.kind is EventKind.VOTE]
        got = (decided, [bool(v.value) for v in votes], [v.state.timed_out for v in votes])
        want = (upstream_decision(state, shape), [upstream_vote(state, shape)], [state.timed_out])
        if got != want:
            wrong.append(f"{state}: (decision, votes, timed out) {got}, the model {want}")
    assert not wrong, "\n".join(wrong)
    # One rank: upstream runs no collective, and none is recorded.
    assert not [e for e in trace.events() if e.kind is EventKind.COLLECTIVE and e.value == "vote_max"]


def test_unified_has_no_timeout_cap_and_the_shim_keeps_it_so(session):
    cache, trace, clock = session(FIXED, "unified_radix", "timeout")
    # 64 tokens: base 2.0 + 0.5 * 64/1024 = 2.03125; with timeout_max_s 2.0 the spec caps it, upstream's unified does not.
    state = DecisionState("timeout", PAGE_SIZE, 16, PAGE_SIZE, True, False, True, False)
    capped = TerminationConfig(policy="timeout", page_size=PAGE_SIZE, timeout_base_s=2.0, timeout_per_ki_token_s=0.5, timeout_max_s=2.0)
    cache.cache.termination = capped
    assert cache.can_terminate(cache.make_operation(state, start_time=clock.now() - 2.01)) is False
    hiradix, _trace, clock = session(FIXED, "hiradix", "timeout")
    hiradix.cache.termination = capped
    assert hiradix.can_terminate(hiradix.make_operation(state, start_time=clock.now() - 2.01)) is True


def copy_checkout(tmp_path: Path, source: Path = FIXED) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(source, root, symlinks=False)
    return root


def edit(root: Path, file_name: str, old: str, new: str) -> None:
    path = root / MEM_CACHE_DIR / file_name
    text = path.read_text()
    assert old in text, f"test setup: {old!r} not in {file_name}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, named", [
    ("        operation_terminated = operation.is_terminated()\n",
     "        operation_terminated = operation.is_terminated() or self.cache_controller.stopping\n", "self.cache_controller"),
    ("        if len(operation.hash_value) == 0:\n", "        if operation.host_indices is None or len(operation.hash_value) == 0:\n",
     "operation.host_indices (the operation)"),
    ("        if self.prefetch_stop_policy == \"best_effort\":\n            return can_terminate\n",
     "        if self.prefetch_stop_policy == \"best_effort\":\n            logger.debug(\"best effort\")\n            return can_terminate\n",
     "module-level name logger.debug"),
    ("getattr(operation, \"pool_transfers_done\", True)", "getattr(operation, \"pool_transfers_finished\", True)",
     "operation.pool_transfers_finished (the operation, via getattr)"),
    ("        limit = min(config.max,", "        limit = min(config.maximum,", "self.prefetch_timeout_config.maximum"),
])
def test_a_name_the_shim_does_not_map_is_one_error_naming_it_and_the_class(tmp_path, old, new, named):
    root = copy_checkout(tmp_path)
    edit(root, "hiradix_cache.py", old, new)
    with pytest.raises(UnmappedName) as raised:
        sglang_adapters(root)
    message = str(raised.value)
    assert "\n" not in message and "HiRadixCache.can_terminate_prefetch" in message and named in message, message
    assert re.search(r"\(line \d+\)", message), message
    assert isinstance(raised.value, ConfigError)  # the harness shows it as one usage-error line


def test_a_missing_class_or_file_is_reported_not_raised(tmp_path):
    root = copy_checkout(tmp_path)
    (root / MEM_CACHE_DIR / "unified_radix_cache.py").unlink()
    edit(root, "hi_mamba_radix_cache.py", "class HiMambaRadixCache(", "class HiMambaRadixCacheV2(")
    adapters, missing = sglang_adapters(root)
    assert [a.name for a in adapters] == ["sglang:hiradix"]
    assert missing == [
        ("sglang:unified_radix", f"{MEM_CACHE_DIR}/unified_radix_cache.py is not in this checkout"),
        ("sglang:hi_mamba_radix", f"class HiMambaRadixCache is not defined in {MEM_CACHE_DIR}/hi_mamba_radix_cache.py"),
    ]
    with pytest.raises(ClassUnavailable, match="defines no can_terminate_prefetch"):
        edit(root, "hiradix_cache.py", "def can_terminate_prefetch(", "def may_terminate_prefetch(")
        extract(root, "hiradix")


def test_a_folder_that_is_not_a_checkout_is_one_error(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid --sglang: .* \(accepted: the root of an SGLang checkout"):
        sglang_adapters(tmp_path)


def test_a_name_read_at_run_time_only_fails_naming_it(session, tmp_path):
    root = copy_checkout(tmp_path)
    # A computed attribute name cannot be checked before the run: the view refuses it when read.
    edit(root, "hiradix_cache.py", "        can_terminate = True\n", "        can_terminate = getattr(self, 'prefetch_' + 'mode')\n")
    cache, _trace, _clock = session(root, "hiradix", "wait_complete")
    state = DecisionState("wait_complete", PAGE_SIZE, 2, 8, False, False, True, False)
    with pytest.raises(ShimError, match=r"HiRadixCache \(self\) has no 'prefetch_mode'"):
        cache.can_terminate(cache.make_operation(state, start_time=0.0))


def test_adapters_md_documents_every_mapped_name():
    text = (REPO / "conformance" / "ADAPTERS.md").read_text()
    section = text[text.index("## Checking an SGLang checkout"):]
    section = section[: section.index("\n## ", 1) if "\n## " in section[1:] else len(section)]
    for name in [*(f"self.{n}" for n in SELF_NAMES), *(f"operation.{n}" for n in OPERATION_NAMES), *GLOBAL_NAMES]:
        leaf = name.rsplit(".", 1)[-1]
        assert leaf in section, f"ADAPTERS.md's shim table does not mention {name}"


def test_a_number_init_sets_once_is_the_class_constant_the_decision_reads(session, tmp_path):
    # Older trees timed out after a fixed number of seconds their __init__ set (`self.prefetch_timeout = 3`).
    root = copy_checkout(tmp_path)
    edit(root, "hiradix_cache.py", "        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy\n",
         "        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy\n        self.prefetch_timeout = 3  # seconds\n")
    edit(root, "hiradix_cache.py", "        return time.monotonic() - operation.start_time > limit\n",
         "        return time.monotonic() - operation.start_time > self.prefetch_timeout\n")
    assert extract(root, "hiradix").constants == (("prefetch_timeout", 3),)
    cache, _trace, clock = session(root, "hiradix", "timeout")
    state = DecisionState("timeout", PAGE_SIZE, 2, PAGE_SIZE, True, False, True, False)
    assert cache.can_terminate(cache.make_operation(state, start_time=clock.now() - 2.9)) is False
    assert cache.can_terminate(cache.make_operation(state, start_time=clock.now() - 3.1)) is True


def test_a_number_init_sets_twice_or_from_configuration_is_not_a_constant(tmp_path):
    root = copy_checkout(tmp_path)
    edit(root, "hiradix_cache.py", "        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy\n",
         "        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy\n        self.prefetch_timeout = 3\n"
         "        if server_args.hicache_storage_prefetch_policy == 'timeout':\n            self.prefetch_timeout = 5\n")
    edit(root, "hiradix_cache.py", "        return time.monotonic() - operation.start_time > limit\n",
         "        return time.monotonic() - operation.start_time > self.prefetch_timeout\n")
    with pytest.raises(UnmappedName, match="self.prefetch_timeout"):
        extract(root, "hiradix")

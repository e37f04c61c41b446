"""The public API under misuse, on all three caches: refused with one clear error, nothing leaked.

A prefetch never evicts its own anchor; a refused write leaks nothing; a
closed cache refuses every call; bad tokens and bad arguments are rejected
before anything is allocated, with errors from the one hierarchy in `caches`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch

import caches
from caches import BadTokensError, CacheArgumentError, CacheClosedError, CacheError
from caches.registry import build
from caches.storage import FileStorage, MemoryStorage, StorageKeyError

NAMES = ("hiradix", "unified_radix", "hi_mamba_radix")


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, f"a multi-line error: {text!r}"
    return text


def drive(cache, request_ids, steps: int = 10) -> dict[str, int]:
    done: dict[str, int] = {}
    for _ in range(steps):
        pending = [r for r in request_ids if r not in done]
        if not pending:
            break
        done.update(cache.check_prefetch_progress(pending))
    return done


# --- 1. a prefetch never evicts its own anchor ------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("others_on_device", [True, False], ids=["host-full-of-device-data", "host-full-of-evictable-data"])
def test_a_prefetch_never_evicts_its_own_anchor(cache_factory, oracle, name, others_on_device):
    cache = cache_factory.build(name, host_pages=4)
    a, b, c = oracle.request(1, 2), oracle.request(2, 2), oracle.request(3, 2)
    cache.write(a, oracle.data(cache, a))
    cache.flush()
    cache.evict(cache.tree.device_tokens())  # A: host only, the prefetch's anchor
    if name == "hi_mamba_radix":
        cache.evict_mamba_host(1)  # the anchor keeps KV but loses the state that pinned it by accident
    cache.write(b, oracle.data(cache, b))
    cache.flush()  # host full: A and B
    if not others_on_device:
        cache.evict(cache.tree.device_tokens())
    requested = cache.prefetch_from_storage("r1", a + c)
    anchor = cache.tree.match_prefix(a).host_node
    assert cache.tree.depth(anchor) == len(a), "the anchor A left the host tier to make room for its own prefetch"
    if others_on_device:
        assert requested == 0, "nothing but the anchor and device-resident data on the host: no room"
    else:
        assert requested == len(c), "B is evictable: the prefetch takes B's room, never A's"
        cache.wait_prefetch_io("r1")
        drive(cache, ["r1"])
    cache.check_prefetch_progress([])
    oracle.assert_exact(cache)


# --- 3. a refused write leaks nothing ----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [[-1], [2**32], [1.5], ["7"], [None], [True], [[1]]], ids=lambda b: repr(b[0]))
def test_a_refused_write_allocates_nothing(cache_factory, oracle, name, bad):
    cache = cache_factory.build(name)
    tokens = oracle.request(4, 2)
    data = oracle.data(cache, tokens)
    before = cache.slot_accounting()
    with pytest.raises(BadTokensError) as err:
        cache.write(tokens[:5] + bad + tokens[6:], data)
    assert "tokens[5]" in one_line(err.value) and "accepted" in str(err.value)
    assert cache.slot_accounting() == before
    oracle.assert_exact(cache)


@pytest.mark.parametrize("name", NAMES)
def test_a_write_with_bad_data_allocates_nothing(cache_factory, oracle, name):
    cache = cache_factory.build(name)
    tokens = oracle.request(5, 2)
    data = oracle.data(cache, tokens)
    data["kv"] = data["kv"][:, :1]
    before = cache.slot_accounting()
    with pytest.raises(CacheArgumentError, match=r"data\['kv'\]"):
        cache.write(tokens, data)
    assert cache.slot_accounting() == before


# --- 4. use after close() ------------------------------------------------------------------------


def _calls(cache, tokens, data, node):
    return {
        "write": lambda: cache.write(tokens, data),
        "flush": cache.flush,
        "evict": lambda: cache.evict(4),
        "evict_host": lambda: cache.evict_host(4),
        "evict_all": cache.evict_all,
        "match_prefix": lambda: cache.match_prefix(tokens),
        "prefetch_from_storage": lambda: cache.prefetch_from_storage("late", tokens),
        "check_prefetch_progress": lambda: cache.check_prefetch_progress(["late"]),
        "release_aborted_request": lambda: cache.release_aborted_request("late"),
        "wait_prefetch_io": lambda: cache.wait_prefetch_io("late"),
        "load_back": lambda: cache.load_back(node),
        "writing_check": cache.writing_check,
        "read_device": lambda: cache.read_device(torch.tensor([0, 1, 2, 3])),
    }


@pytest.mark.parametrize("name", NAMES)
def test_every_call_after_close_is_refused_at_once(cache_factory, oracle, name):
    cache = cache_factory.build(name)
    tokens = oracle.request(6, 2)
    data = oracle.data(cache, tokens)
    cache.write(tokens, data)
    cache.flush()
    node = cache.match_prefix(tokens).device_node
    cache.close()
    accounting = cache.slot_accounting()
    for call, run in _calls(cache, tokens, data, node).items():
        with pytest.raises(CacheClosedError) as err:
            run()
        assert f"{call}()" in one_line(err.value) and "closed" in str(err.value), call
    assert cache.slot_accounting() == accounting, "a refused call changed the slot accounting"
    assert not any(t.is_alive() for t in cache.threads())
    cache.close()  # closing twice is allowed


# --- 5. bad tokens -----------------------------------------------------------------------------


BAD_TOKENS = [
    ("12345678", "not one string"),
    (b"\x01\x02\x03\x04", "not one string"),
    (None, "a list of token ids"),
    (12, "a list of token ids"),
    ({1, 2, 3, 4}, "a list of token ids"),
    ([1, 2, 3, 4.0], "tokens[3]"),
    ([1, 2, None, 4], "tokens[2]"),
    ([1, [2], 3, 4], "tokens[1]"),
    ([1, 2, 3, -4], "tokens[3]"),
    ([False, 1, 2, 3], "tokens[0]"),
    (torch.tensor([1.0, 2.0, 3.0, 4.0]), "float"),
    (torch.tensor([[1, 2, 3, 4]]), "one dimension"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("tokens", "named"), BAD_TOKENS, ids=[repr(t)[:24] for t, _ in BAD_TOKENS])
def test_bad_tokens_are_one_clear_error_on_every_entry_point(cache_factory, name, tokens, named):
    cache = cache_factory.build(name)
    before = cache.slot_accounting()
    for call in (lambda: cache.match_prefix(tokens), lambda: cache.prefetch_from_storage("r", tokens),
                 lambda: cache.write(tokens, {})):
        with pytest.raises(BadTokensError) as err:
            call()
        assert named in one_line(err.value) and "accepted" in str(err.value)
        assert isinstance(err.value, CacheArgumentError) and isinstance(err.value, ValueError)
    assert cache.slot_accounting() == before and not cache.ongoing_prefetch


@pytest.mark.parametrize("name", NAMES)
def test_integer_tensors_and_tuples_are_token_lists(cache_factory, oracle, name):
    cache = cache_factory.build(name)
    tokens = oracle.request(7, 2)
    cache.write(torch.tensor(tokens), oracle.data(cache, tokens))
    assert cache.match_prefix(tuple(tokens)).device_hit_tokens == len(tokens)
    assert cache.match_prefix(torch.tensor(tokens, dtype=torch.int32)).device_hit_tokens == len(tokens)


# --- 8. errors of the right kind --------------------------------------------------------------------


def test_an_over_long_pool_suffix_is_a_key_error_not_an_os_error(tmp_path):
    key = "a" * 64 + "." + "p" * 300
    for store in (FileStorage(tmp_path / "s"), MemoryStorage()):
        with store:
            for call in (lambda: store.remove([key]), lambda: store.exists_prefix([key])):
                with pytest.raises(StorageKeyError) as err:
                    call()
                assert "at most" in one_line(err.value)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("node", "quota", "named"), [
    (None, None, "node"), ("root", None, "node"), ("real", -1, "quota_tokens"),
    ("real", 1.5, "quota_tokens"), ("real", True, "quota_tokens"),
])
def test_load_back_rejects_bad_arguments(cache_factory, oracle, name, node, quota, named):
    cache = cache_factory.build(name)
    tokens = oracle.request(8, 2)
    cache.write(tokens, oracle.data(cache, tokens))
    cache.flush()
    cache.evict(len(tokens))
    target = {"real": cache.match_prefix(tokens).host_node, "root": object(), None: None}[node]
    before = cache.slot_accounting()
    with pytest.raises(CacheArgumentError) as err:
        cache.load_back(target, quota)
    assert f"invalid {named}" in one_line(err.value)
    assert cache.slot_accounting() == before


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("ids", ["r1", b"r1", None, ["r1", 7], ["r1", ""], 3], ids=repr)
def test_check_prefetch_progress_argument_rule_is_one_rule(cache_factory, name, ids):
    cache = cache_factory.build(name)
    with pytest.raises(CacheArgumentError) as err:
        cache.check_prefetch_progress(ids)
    message = one_line(err.value)
    assert message.startswith("invalid request_ids") and "(accepted: a list of non-empty request id strings)" in message


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("call", ["evict", "evict_host"])
@pytest.mark.parametrize("count", [-1, 1.5, True, "4"], ids=repr)
def test_eviction_counts_are_checked(cache_factory, name, call, count):
    cache = cache_factory.build(name)
    with pytest.raises(CacheArgumentError, match="num_tokens"):
        getattr(cache, call)(count)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("request_id", ["", None, 5])
def test_request_ids_are_checked_everywhere(cache_factory, oracle, name, request_id):
    cache = cache_factory.build(name)
    for call in (lambda: cache.prefetch_from_storage(request_id, oracle.request(9, 1)),
                 lambda: cache.release_aborted_request(request_id), lambda: cache.wait_prefetch_io(request_id)):
        with pytest.raises(CacheArgumentError, match="request_id"):
            call()


# --- the hierarchy ----------------------------------------------------------------------------------


def test_one_exception_hierarchy_is_exported_from_caches():
    names = ["CacheError", "CacheArgumentError", "BadTokensError", "CacheClosedError", "CacheFullError",
             "CacheTimeoutError", "BackgroundError", "StorageError", "StorageKeyError"]
    for name in names:
        cls = getattr(caches, name)
        assert issubclass(cls, CacheError), name
    assert issubclass(caches.CacheTimeoutError, TimeoutError)
    assert issubclass(caches.BadTokensError, ValueError)
    from caches.core.copy_engine import CopyTimeout
    from caches.core.write_path import CacheFullError

    assert CacheFullError is caches.CacheFullError and issubclass(CopyTimeout, caches.CacheTimeoutError)


def exception_classes_defined_under_caches() -> dict[str, type]:
    found = {}
    for module_info in pkgutil.walk_packages(caches.__path__, "caches."):
        module = importlib.import_module(module_info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = cls
    return found


def test_every_exception_class_defined_under_caches_is_a_cache_error():
    classes = exception_classes_defined_under_caches()
    assert len(classes) >= 20, f"the walk found too few exception classes to be the whole package: {sorted(classes)}"
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, CacheError))
    assert outside == [], f"exception classes outside caches.CacheError: {outside}"
    from spec.errors import ConfigError

    assert issubclass(ConfigError, CacheError), "spec's ConfigError, raised by every cache's config, is not a CacheError"


MATRIX = torch.zeros(40, 40)


# Each takes (cache, a valid token list); a tensor argument's repr would be many lines long.
HOSTILE = {
    "a float tensor among the tokens": lambda cache, tokens: cache.match_prefix([*tokens[:3], torch.tensor(2.5)]),
    "a 2-D tensor among the tokens": lambda cache, tokens: cache.match_prefix([*tokens[:3], torch.zeros(2, 2, dtype=torch.int64)]),
    "a slot outside the pool": lambda cache, tokens: cache.read_device(torch.tensor([10**6])),
    "float slots": lambda cache, tokens: cache.read_device(torch.zeros(50, 3)),
    "a list as slots": lambda cache, tokens: cache.read_device([0, 1, 2]),
    "a tensor as a count": lambda cache, tokens: cache.evict(MATRIX),
    "a tensor as a node": lambda cache, tokens: cache.load_back(MATRIX),
    "a tensor as request ids": lambda cache, tokens: cache.check_prefetch_progress(MATRIX),
    "a tensor as a request id": lambda cache, tokens: cache.prefetch_from_storage(MATRIX, tokens),
    "a tensor as an element shape": lambda cache, tokens: build(cache.name, {"storage_backend": "memory", "kv_elem_shape": MATRIX}),
    "a page size of 0": lambda cache, tokens: build(cache.name, {"storage_backend": "memory", "page_size": 0}),
    "an unknown cache": lambda cache, tokens: build("no_such_cache", {"storage_backend": "memory"}),
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_arguments_are_one_bounded_line_of_a_cache_error(cache_factory, oracle, name, case):
    cache = cache_factory.build(name)
    before = cache.slot_accounting()
    with pytest.raises(Exception) as err:
        HOSTILE[case](cache, oracle.request(10, 1))
    assert isinstance(err.value, CacheError), f"{type(err.value).__module__}.{type(err.value).__name__} is not a CacheError: {err.value}"
    message = one_line(err.value)
    assert len(message) <= 300, f"a {len(message)}-character message: {message[:200]}..."
    if "tensor as" in case:
        assert "shape=(40, 40)" in message, f"the tensor is not described by its shape: {message}"
    assert cache.slot_accounting() == before


@pytest.mark.parametrize("name", NAMES)
def test_an_unusable_storage_path_is_refused_before_any_thread_starts(name, tmp_path):
    import threading

    from spec.trace import TraceRecorder

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    before = set(threading.enumerate())
    extra = {"hiradix": (), "unified_radix": (), "hi_mamba_radix": ("mamba",)}[name]
    with pytest.raises(ValueError, match="storage_path") as refused:
        build(name, {"page_size": 4, "storage_path": str(blocker), "extra_pools": extra}, trace=TraceRecorder())
    one_line(refused.value)
    assert set(threading.enumerate()) - before == set(), "a refused cache left a thread running"

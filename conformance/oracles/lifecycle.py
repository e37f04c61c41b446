"""The end of a cache's life in a test: close it, and fail if a thread outlived it or a background thread failed.

Used by the suite's `make_cache` fixture and by the project's own cache
factory (tests/conftest.py), so that every test closes its caches one way.
An instance is anything with close() and threads() (a CacheUnderTest, or a
cache itself); background_errors() is optional (adapter.py): one line per
unexpected exception a background thread hit, a bug as opposed to a storage
fault.
"""

from __future__ import annotations

from typing import Any, Iterable

from spec.invariants import unfenced_violations


def background_errors(instance: Any) -> list[str]:
    report = getattr(instance, "background_errors", None)  # optional member of the protocol
    return [str(error) for error in report()] if callable(report) else []


def close_and_check(instances: Iterable[Any], *, gates: Iterable[Any] = (), errors_expected: Iterable[Any] = (), traces: Iterable[Any] = (),
                    already_reported: str = "") -> None:
    """Release every gate (a parked thread keeps close() from finishing), close every instance, then check.

    Every instance is closed even when an earlier close raised (the first
    such error is raised after the rest closed). Then: no thread an instance
    started may still run, and no instance outside `errors_expected` (whose
    test planted a bug and checked the error itself) may report a background
    error. A background error the test's own failure already states
    (`already_reported`, its message) is that finding, not a second one.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    instances = list(instances)
    for gate in gates:
        gate.release_all()
    # Listed before closing too: an implementation may forget its threads once closed.
    started = [list(instance.threads()) for instance in instances]
    first_error: BaseException | None = None
    for instance in instances:
        try:
            instance.close()
        except BaseException as exc:  # close the rest before reporting
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    threads = {t for listed in started for t in listed} | {t for instance in instances for t in instance.threads()}
    leftovers = sorted(t.name for t in threads if t.is_alive())
    assert not leftovers, f"threads still running after close(): {leftovers}"
    expected = {id(instance) for instance in errors_expected}
    failed = [error for instance in instances if id(instance) not in expected for error in background_errors(instance)
              if error not in already_reported]
    assert not failed, f"unexpected exceptions on background threads (bugs, not storage faults): {failed}"
    assert_fence_lock_kept(traces)


def assert_fence_lock_kept(traces: Iterable[Any]) -> None:
    """Every fenced section a recorder checked ran under its operation's lock (spec/fence_lock.py); judged after every test."""
    __tracebackhide__ = True
    unique = {id(trace): trace for trace in traces}.values()
    violations = [v for trace in unique for v in unfenced_violations(trace.rank, trace.unfenced())]
    assert not violations, "\n".join(str(v) for v in violations[:3]) + (f"\n... {len(violations) - 3} more" if len(violations) > 3 else "")

"""Where an event came from, when the implementation runs code it compiled from a user's tree (as --sglang does)."""

from __future__ import annotations

from pathlib import Path

from spec import EventKind, ManualClock, TraceRecorder

from conformance.report import sites

# Upstream-shaped: a decision in a package whose inner folders have no __init__.py (as sglang/srt/mem_cache/).
DECISION = "def can_terminate_prefetch(self, reduce):\n    return reduce([1, 0])\n"


def compiled_decision(root: Path):
    """The decision compiled from its file in the tree and run from a namespace no import made, as an adapter's shim does."""
    folder = root / "python" / "sglang" / "srt" / "mem_cache"
    folder.mkdir(parents=True)
    (root / "python" / "sglang" / "__init__.py").write_text("")
    path = folder / "hiradix_cache.py"
    path.write_text(DECISION)
    namespace: dict = {}
    exec(compile(DECISION, str(path), "exec"), namespace)
    return namespace["can_terminate_prefetch"]


def test_a_site_starts_at_the_code_compiled_from_the_tree_not_at_the_adapter_s_stand_in(tmp_path):
    trace = sites.attach(TraceRecorder(ManualClock(0.0)))

    def all_reduce_stand_in(values):  # the adapter's stand-in for torch.distributed, recording the vote
        return trace.record(EventKind.STEP, step=values[0])

    event = compiled_decision(tmp_path)(None, all_reduce_stand_in)
    site = sites.sites(trace)[event.seq]
    assert site.startswith("sglang/srt/mem_cache/hiradix_cache.py:2 (can_terminate_prefetch) < "), site
    assert str(tmp_path) not in site


def test_a_file_no_import_loaded_is_shown_from_its_outermost_package(tmp_path):
    compiled_decision(tmp_path)
    shown = sites.package_path(str(tmp_path / "python" / "sglang" / "srt" / "mem_cache" / "hiradix_cache.py"))
    assert shown == "sglang/srt/mem_cache/hiradix_cache.py"
    assert sites.package_path(str(tmp_path / "loose.py")) == "loose.py"

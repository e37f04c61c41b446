"""The conformance options checked at configure time, and the --clause selection.

A value that could only fail after the last test (a report or script folder
that cannot be written, an existing file where a folder goes) is a one-line
usage error before collection instead, naming the option, the value and what
it accepts: a long run must not end in a traceback and no report.
--cache-impl, --sglang, --sglang-live and --expected-failures are checked
where they are loaded (conformance/plugin/harness.py), also before collection.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPORT_SUFFIXES = (".json", ".md", ".html")
REPORT_ACCEPTED = "a path prefix: PATH.json, PATH.md and PATH.html are written, in a folder that can be created and written"
REPRO_ACCEPTED = "a folder, created if missing, that can be written: one script per defect entry goes there"


def _usage(option: str, value: str, accepted: str, why: str = "") -> pytest.UsageError:
    return pytest.UsageError(f"invalid {option}: {value!r} (accepted: {accepted}" + (f"; {why})" if why else ")"))


def check_options(config: pytest.Config) -> None:
    """Every conformance option this module checks; the output paths only where the report is written (not in xdist workers)."""
    selected_clauses(config)
    if config.getoption("--sglang-shim") and config.getoption("--sglang") is None:
        raise _usage("--sglang-shim", config.getoption("--sglang-shim"), "a factory for --sglang PATH, given with it",
                     "no --sglang PATH was given")
    if getattr(config, "workerinput", None) is None:
        check_report_path(config.getoption("--conformance-report"))
        check_repro_dir(config.getoption("--conformance-repro"))


def check_report_path(value: str | None) -> None:
    """--conformance-report PATH: a prefix; a folder, or a name already ending in a report suffix, would be misread."""
    if value is None:
        return
    option = "--conformance-report"
    if not value.strip():
        raise _usage(option, value, REPORT_ACCEPTED)
    base = Path(value)
    # Path() drops a trailing slash: "out/" would write out.json beside the folder.
    if value.endswith(("/", os.sep)) or base.is_dir():
        raise _usage(option, value, REPORT_ACCEPTED, f"it is a folder, so the report would go beside it as {base.name}.json; "
                                                     f"name a prefix inside it, e.g. {(base / 'report').as_posix()}")
    if base.suffix.lower() in REPORT_SUFFIXES:
        raise _usage(option, value, REPORT_ACCEPTED, f"it would write {base.name}.json; give the prefix without {base.suffix}")
    taken = [str(p) for p in (base.with_name(base.name + s) for s in REPORT_SUFFIXES) if p.is_dir()]
    if taken:
        raise _usage(option, value, REPORT_ACCEPTED, f"{', '.join(taken)} is a folder")
    blocked = _blocked_folder(base.parent)
    if blocked:
        raise _usage(option, value, REPORT_ACCEPTED, blocked)
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        probe = base.with_name(base.name + ".json")
        existed = probe.exists()
        with open(probe, "a", encoding="utf-8"):
            pass
        if not existed:
            probe.unlink()
    except OSError as exc:
        raise _usage(option, value, REPORT_ACCEPTED, exc.strerror or type(exc).__name__) from None


def check_repro_dir(value: str | None) -> None:
    """--conformance-repro DIR: an existing folder that can be written, or one that can be created; nothing is created now."""
    if value is None:
        return
    option = "--conformance-repro"
    if not value.strip():
        raise _usage(option, value, REPRO_ACCEPTED)
    folder = Path(value)
    if folder.exists() and not folder.is_dir():
        raise _usage(option, value, REPRO_ACCEPTED, "it is a file")
    blocked = _blocked_folder(folder)
    if blocked:
        raise _usage(option, value, REPRO_ACCEPTED, blocked)


def _blocked_folder(folder: Path) -> str | None:
    """Why `folder` cannot be used or created and written (nothing is created now); None: it can."""
    existing = folder
    while not existing.exists():  # the nearest one that is there: the rest can be created after the run
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so no folder can be created under it"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"{existing} cannot be written ({exc.strerror or type(exc).__name__})"
    return None


def selected_clauses(config: pytest.Config) -> list[str]:
    """The clause IDs --clause names (repeatable, comma-separated); empty without the option."""
    from spec.clauses import CATALOGUE

    given = config.getoption("--clause", None) or []
    ids = [part.strip().upper() for value in given for part in value.split(",") if part.strip()]
    unknown = [i for i in ids if i not in CATALOGUE]
    if unknown or (given and not ids):
        raise _usage("--clause", ",".join(given), f"clause IDs, comma-separated: {', '.join(CATALOGUE)}",
                     f"unknown: {', '.join(unknown)}" if unknown else "no clause ID given")
    return list(dict.fromkeys(ids))


def add_clause_keywords(item: pytest.Item) -> None:
    """`-k D3` selects the tests citing D3: pytest matches -k against an item's names and these extra keywords."""
    from conformance.plugin.harness import clause_ids

    item.extra_keyword_matches.update(clause_ids(item))


def keep_selected_clauses(config: pytest.Config, items: list[Any]) -> None:
    """--clause: only the tests citing one of the clauses stay; the rest are deselected (pytest counts them so)."""
    from conformance.plugin.harness import clause_ids

    wanted = set(selected_clauses(config))
    if not wanted:
        return
    kept, dropped = [], []
    for item in items:
        (kept if wanted.intersection(clause_ids(item)) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

"""A live run builds a tree's JIT C++ helpers in a folder of its own, so a lock file a killed build left elsewhere cannot stall it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from conformance.live.extensions import ENV, PREFIX, build_ahead, own_build_folder
from spec.errors import ConfigError


def test_a_run_builds_into_a_fresh_folder_of_its_own():
    environ: dict[str, str] = {}
    folder = own_build_folder(environ)
    assert folder is not None and environ[ENV] == folder
    assert Path(folder).is_dir() and Path(folder).name.startswith(PREFIX) and not any(Path(folder).iterdir())
    assert own_build_folder({}) != folder  # each run its own


def test_a_folder_the_user_names_is_kept():
    environ = {ENV: "/srv/torch-extensions"}
    assert own_build_folder(environ) is None and environ == {ENV: "/srv/torch-extensions"}


def test_the_page_hash_runs_ahead_and_a_failing_one_is_a_note():
    hashed: list[list[int]] = []
    assert build_ahead(hashed.append, seconds=5) is None and hashed == [[1, 2, 3, 4]]

    def no_compiler(tokens):
        raise RuntimeError("Failed to load HiCache native hash extension")

    assert build_ahead(no_compiler, seconds=5) == "the tree's page hash fails here: RuntimeError: Failed to load HiCache native hash extension"


def test_a_page_hash_that_never_returns_is_one_line_naming_the_lock(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV, str(tmp_path))
    released = threading.Event()
    try:
        with pytest.raises(ConfigError) as caught:
            build_ahead(lambda tokens: released.wait(), seconds=0.2)  # torch's build polling a lock file nobody removes
    finally:
        released.set()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"invalid {ENV}: '{tmp_path}'"), message
    assert f"remove {tmp_path}/*/lock" in message and "within 0.2 s" in message, message

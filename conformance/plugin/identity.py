"""What a report says was tested, with what, where: the suite, each implementation, the machine.

Every value is looked up, never assumed: a distribution's version comes from
its installed metadata (the suite's, when it runs from a checkout it was not
installed from, from the checkout's pyproject.toml), a commit from git (or
from pip's record of a VCS install), and each is null when it cannot be
known (a module on the path, a wheel built from a tree without git).
"""

from __future__ import annotations

import json
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Sequence

from conformance.implementations.loader import Origin

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli backport the package depends on there
    import tomli as tomllib  # type: ignore[no-redef]

SUITE_DISTRIBUTION = "hicache-conformance"
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the conformance package
_GIT_TIMEOUT_S = 10


def _git(path: Path, *args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(path: str | Path, only: tuple[str, ...] = ()) -> dict | None:
    """{"commit", "modified"} of the git checkout holding path; None when it is not one (or git is missing).

    only: the folders, beside path's, whose changes count as "modified" (default: the whole checkout)."""
    folder = Path(path).expanduser()
    folder = folder if folder.is_dir() else folder.parent
    if not folder.is_dir():
        return None
    head = (_git(folder, "rev-parse", "HEAD") or "").strip()
    if len(head) != 40:
        return None
    scope = [str(folder.parent / name) for name in only if (folder.parent / name).is_dir()]
    status = _git(folder, "status", "--porcelain", "--untracked-files=no", *(["--", *scope] if scope else []))
    return {"commit": head, "modified": None if status is None else bool(status.strip())}


@lru_cache(maxsize=1)
def _providers() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def distribution_of(module: str) -> dict | None:
    """{"name", "version"} of the installed distribution providing module's top-level package, or None."""
    names = _providers().get(module.split(".")[0], [])
    for name in names:
        try:
            return {"name": metadata.metadata(name)["Name"], "version": metadata.version(name)}
        except metadata.PackageNotFoundError:
            continue
    return None


def _recorded_commit(distribution: str) -> str | None:
    """The commit pip recorded for a VCS install (PEP 610 direct_url.json), if any."""
    try:
        text = metadata.distribution(distribution).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        return json.loads(text or "{}").get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return None


def source_version(package_dir: Path = PACKAGE_DIR) -> str | None:
    """The version the source tree holding the package declares (its pyproject.toml), for a suite run from a checkout
    without installing it (as a separate environment runs the live side); None when that file is not this project's."""
    try:
        project = tomllib.loads((package_dir.parent / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return project.get("version") if project.get("name") == SUITE_DISTRIBUTION else None


# What a run of the suite executes: an uncommitted change elsewhere (the linter, the docs) changes no verdict.
SUITE_PACKAGES = ("conformance", "spec", "caches")


def suite_identity() -> dict:
    """This suite: distribution name and version, commit (and uncommitted changes), where it was loaded from."""
    dist = distribution_of(__name__)
    git = git_state(PACKAGE_DIR, only=SUITE_PACKAGES)
    commit = git["commit"] if git else _recorded_commit(SUITE_DISTRIBUTION)
    return {"name": SUITE_DISTRIBUTION, "version": dist["version"] if dist else source_version(), "commit": commit,
            "modified": git["modified"] if git else None, "path": str(PACKAGE_DIR)}


def _checkout(origin: Origin) -> dict | None:
    """For --sglang / --sglang-live: the tree the option named, with its commit when it is a git checkout."""
    if origin.source not in ("--sglang", "--sglang-live") or not origin.value:
        return None
    path = origin.value
    if origin.source == "--sglang-live":
        from conformance.live.tree import parse_option

        path = str(parse_option(origin.value)[0])
    git = git_state(path)
    return {"path": path, "commit": git["commit"] if git else None, "modified": git["modified"] if git else None}


def implementation_identity(adapter: Any, origin: Origin) -> dict:
    """Name, where it came from (option or entry point), factory, module, distribution and version, adapter class."""
    cls = type(adapter)
    module = origin.factory.partition(":")[0] if origin.factory else cls.__module__
    distribution = ({"name": origin.distribution[0], "version": origin.distribution[1]} if origin.distribution
                    else distribution_of(module))
    return {
        "name": adapter.name,
        "source": origin.source,
        "source_value": origin.value,
        "factory": origin.factory,
        "module": module,
        "distribution": distribution,
        "adapter": f"{cls.__module__}.{cls.__qualname__}",
        "capabilities": sorted(adapter.capabilities),
        "default_extra_pools": list(adapter.default_extra_pools),
        "checkout": _checkout(origin),
    }


def describe_target(devices: Sequence[Mapping[str, Any]]) -> dict:
    """The machine the suite ran on: device kinds and models, torch, Python, platform."""
    import torch

    return {
        "device_kinds": sorted({d["kind"] for d in devices}),
        "devices": [dict(d) for d in devices],
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }

"""Find SGLang's package in what a user points --sglang-live at, without importing it.

Accepted, PATH being:
  - a source checkout (the tree containing python/sglang), at any commit;
  - a directory holding the `sglang` package: an unpacked wheel
    (`pip download sglang==0.5.23 --no-deps`, then unzip) or a site-packages;
  - the `sglang` package directory itself.
An optional `@LABEL` suffix names the target in the matrix (a commit, say, for
a `git archive` tree that carries no .git).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from conformance.bounds import EXIT_S
from conformance.live.layouts import BY_KEY, CLASS_FILES, LAYOUTS
from spec.errors import ConfigError

OPTION = "--sglang-live"
ACCEPTED = "an SGLang source checkout (containing python/sglang/__init__.py), a directory holding the sglang package (an unpacked wheel, a site-packages), or the sglang package directory"

@dataclass(frozen=True)
class SglangTree:
    given: str  # what the user passed, for messages
    import_root: Path  # the directory to put on sys.path (it contains sglang/)
    label: str  # the version or commit shown in the matrix
    layouts: tuple[str, ...]  # keys of the layouts (conformance/live/layouts) the tree runs, in the matrix's order
    missing: tuple[str, ...]  # live classes absent from the tree, one line each
    unwired: tuple[str, ...]  # layouts of a class the tree defines whose marks it lacks, one line each (reported, not run)

    @property
    def package(self) -> Path:
        return self.import_root / "sglang"


def parse_option(value: str) -> tuple[Path, str | None]:
    """'PATH' or 'PATH@LABEL' -> (path, label)."""
    path, sep, label = value.rpartition("@")
    if not sep:
        return Path(value).expanduser(), None
    if not label or not re.fullmatch(r"[A-Za-z0-9._+~-]+", label):
        raise ConfigError(OPTION, value, "PATH or PATH@LABEL, LABEL made of letters, digits and . _ + ~ -")
    return Path(path).expanduser(), label


def locate(value: str) -> SglangTree:
    """The SGLang tree named by an --sglang-live value; a ConfigError (one line) if it is not one."""
    path, label = parse_option(value)
    if not path.exists():
        raise ConfigError(OPTION, value, f"an existing path: {ACCEPTED}")
    root = _import_root(path.resolve())
    if root is None:
        raise ConfigError(OPTION, value, ACCEPTED)
    package = root / "sglang"
    defined = [name for name, rel in CLASS_FILES.items() if _defines(package / rel, name)]
    found, unwired = [], []
    refused: list[tuple[str, str]] = []  # (row, line)
    for layout in LAYOUTS:
        if layout.class_name not in defined:
            continue
        why = layout.missing_in(package)
        if why is None:
            found.append(layout.key)
        else:
            name = layout.class_name if layout.key == layout.class_name else f"{layout.key} ({layout.class_name})"
            refused.append((layout.row, f"{name} is in the tree but not in {layout.layout_name} the harness is wired to ({why})"))
    # A layout of a row another layout runs is that row's other build, not a blind spot: only rows that run nowhere say why.
    running = {BY_KEY[key].row for key in found}
    unwired = [line for row, line in refused if row not in running]
    missing = tuple(
        f"{name}: not defined in sglang/{rel}" if (package / rel).is_file() else f"{name}: sglang/{rel} does not exist"
        for name, rel in CLASS_FILES.items()
        if name not in defined
    )
    return SglangTree(value, root, label or detect_label(path.resolve(), package), tuple(found), missing, tuple(unwired))


def _import_root(path: Path) -> Path | None:
    if (path / "python" / "sglang" / "__init__.py").is_file():
        return path / "python"
    if (path / "sglang" / "__init__.py").is_file():
        return path
    if path.name == "sglang" and (path / "__init__.py").is_file():
        return path.parent
    return None


def _defines(module: Path, class_name: str) -> bool:
    if not module.is_file():
        return False
    return re.search(rf"^class {re.escape(class_name)}\b", module.read_text(encoding="utf-8", errors="replace"), re.M) is not None


def detect_label(path: Path, package: Path) -> str:
    """A short commit when the tree is a git checkout, else the package's own version, else 'unknown'."""
    commit = _git_commit(path)
    if commit:
        return commit
    for name in ("version.py", "_version.py"):
        version_file = package / name
        if version_file.is_file():
            found = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", version_file.read_text(encoding="utf-8", errors="replace"), re.M)
            if found:
                return found.group(1)
    dist = sorted(package.parent.glob("sglang-*.dist-info"))
    if dist:
        return dist[-1].name[len("sglang-") : -len(".dist-info")]
    return "unknown"


def _git_commit(path: Path) -> str | None:
    if not any((p / ".git").exists() for p in (path, *path.parents)):
        return None
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True, timeout=EXIT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None

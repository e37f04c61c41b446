"""`[tool.hicache-lint]` configuration: which table a run uses, its defaults,
validation and the Config record.

Which table: from each linted path upward, the nearest pyproject.toml with the
table; else from the current directory upward; else a pyproject.toml with the
table one level below the repository root (SGLang keeps its own in `python/`).
Without any, the defaults, rooted at the repository root (or the current
directory).

Which rules a selection names is lint/selection.py's job (this module knows no
rule, so that the analysis can use the records here without importing the rules).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

try:  # Python >= 3.11
    import tomllib as toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 needs the backport
    try:
        import tomli as toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        toml = None  # type: ignore[assignment]

from lint.errors import LintConfigError
from lint.protocol import DONE

SECTION = "hicache-lint"
# Both upstream architectures: the fork's vote per check and 0.5.2x's ACK drain.
DEFAULT_METHODS = ("can_terminate_prefetch", "_can_terminate_prefetch")
DEFAULT_COMMIT_METHODS = ("_handle_prefetch_result", "_drain_storage_control_queues_impl", "release_aborted_request")
DEFAULT_REDUCE_CALLS = ("all_reduce", "all_reduce_max", "all_reduce_min")
DEFAULT_SIDECAR_FIELDS = ("pool_transfers", "comp_xfers")
DEFAULT_IO_ENDED = ("completed_req",)  # SGLang 0.5.2x: the final prefetch ACK
DEFAULT_ALLOCATION_FIELDS = ("host_indices",)
# true once every pool transfer has ended: the pool get's ACK carries its hits;
# 0.5.2x's hybrid check passes only when every non-KV pool served its whole hit
DEFAULT_POOLS_ENDED = ("pool_hits", "_check_hybrid_prefetch_result")
# names (or parts of names) through which a class brings extra-pool transfers in
DEFAULT_POOL_FIELDS = ("pool_transfers", "extra_pools")
# as ruff's default excludes, plus the build outputs of this ecosystem
DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache", ".nox",
    ".pants.d", ".pyenv", ".pytest_cache", ".pytype", ".ruff_cache", ".svn", ".tox", ".venv", ".vscode",
    "__pypackages__", "__pycache__", "_build", "buck-out", "build", "dist", "node_modules", "site-packages",
    "venv", "*.egg-info",
)
GUARD_PLACES = ("decision", "commit")

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IMPL = re.compile(r"^(?P<path>[^:]+)::(?P<cls>[A-Za-z_][\w.]*)\.(?P<method>[A-Za-z_]\w*)$")
SELECTOR = re.compile(r"^(ALL|[A-Z]+[0-9]*|[a-z][a-z0-9-]*)$")


@dataclass(frozen=True)
class Implementation:
    """One implementation of the protocol, configured or recognized.

    fenced: its commit clamps to every pool (F3) and frees slots only after
    their IO ends (F5), so the guard may take the spec's completion form.
    guard: where the pool_transfers_done check must live: "decision" (the
    decision method) or "commit" (the `commit` methods, which commit or
    release sidecar results: the 0.5.2x ACK drain); None: recognized from the
    class (see lint/file_analysis.py).
    extra_pools: the configuration says the class has extra pools (None: not said).
    """

    path: str  # relative to the configuration root
    class_qualname: str
    method: str
    fenced: bool = False
    guard: Optional[str] = None
    commit: tuple[str, ...] = ()
    sidecar_fields: tuple[str, ...] = DEFAULT_SIDECAR_FIELDS
    io_ended: tuple[str, ...] = DEFAULT_IO_ENDED
    allocation_fields: tuple[str, ...] = DEFAULT_ALLOCATION_FIELDS
    pools_ended: tuple[str, ...] = DEFAULT_POOLS_ENDED
    extra_pools: Optional[bool] = None
    configured: bool = field(default=False, compare=False)  # listed in the configuration (else recognized)

    def __str__(self) -> str:
        return f"{self.path}::{self.class_qualname}.{self.method}"


@dataclass(frozen=True)
class Config:
    methods: tuple[str, ...] = DEFAULT_METHODS
    reduce_calls: tuple[str, ...] = DEFAULT_REDUCE_CALLS
    implementations: tuple[Implementation, ...] = ()
    commit_methods: tuple[str, ...] = DEFAULT_COMMIT_METHODS
    sidecar_fields: tuple[str, ...] = DEFAULT_SIDECAR_FIELDS
    io_ended: tuple[str, ...] = DEFAULT_IO_ENDED
    allocation_fields: tuple[str, ...] = DEFAULT_ALLOCATION_FIELDS
    pools_ended: tuple[str, ...] = DEFAULT_POOLS_ENDED
    pool_fields: tuple[str, ...] = DEFAULT_POOL_FIELDS
    # the attribute set once every extra-pool transfer of an operation ended
    completion_flag: str = DONE
    # rule selection, as written (lint/selection.py resolves it against the rules)
    select: Optional[tuple[str, ...]] = None  # None: every rule
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    respect_gitignore: bool = True
    baseline: Optional[Path] = None
    fail_on_warnings: bool = False
    root: Path = field(default_factory=Path.cwd)
    source: Optional[Path] = None

    def implementation_for(self, path: Path, class_qualname: str) -> Optional[Implementation]:
        """The configured implementation this file's class is, if any."""
        if not self.implementations:
            return None
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop
            return None
        for impl in self.implementations:
            if impl.class_qualname == class_qualname and (self.root / impl.path).resolve() == resolved:
                return impl
        return None

    def recognized(self, path: str, class_qualname: str, method: str) -> Implementation:
        """An implementation nobody configured, with the top-level defaults."""
        return Implementation(path, class_qualname, method, sidecar_fields=self.sidecar_fields,
                              io_ended=self.io_ended, allocation_fields=self.allocation_fields,
                              pools_ended=self.pools_ended)


class _Table:
    """Typed reads of one TOML table; every error names the key, the value and what is accepted."""

    def __init__(self, table: dict, source: str, where: str, prefix: str = "") -> None:
        self.table, self.source, self.where, self.prefix = table, source, where, prefix

    def fail(self, message: str) -> LintConfigError:
        return LintConfigError(self.source, f"{self.where} {message}")

    def check_keys(self, known: tuple[str, ...]) -> None:
        for key in self.table:
            if key not in known:
                raise self.fail(f"unknown key {key!r} (value {self.table[key]!r}); accepted keys: "
                                + ", ".join(known))

    def strings(self, key: str, default: Any, accepted: str, pattern: Optional[re.Pattern] = None,
                allow_empty: bool = False) -> Any:
        if key not in self.table:
            return default
        value = self.table[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{self.prefix}{key} = {value!r}: expected a list of strings ({accepted})")
        if not value and not allow_empty:
            raise self.fail(f"{self.prefix}{key} = []: expected at least one entry ({accepted})")
        for item in value:
            if pattern is not None and not pattern.match(item):
                raise self.fail(f"{self.prefix}{key}: entry {item!r} is not valid; accepted: {accepted}")
        return tuple(value)

    def name(self, key: str, default: str, accepted: str) -> str:
        value = self.table.get(key, default)
        if key in self.table and not (isinstance(value, str) and IDENT.match(value)):
            raise self.fail(f"{key} = {value!r}: expected one identifier ({accepted})")
        return value

    def boolean(self, key: str, default: Any) -> Any:
        value = self.table.get(key, default)
        if key in self.table and not isinstance(value, bool):
            raise self.fail(f"{key} = {value!r}: expected true or false")
        return value

    def names(self, key: str, default: Any, accepted: str, allow_empty: bool = True) -> Any:
        return self.strings(key, default, accepted, IDENT, allow_empty)


_SELECTORS = "rule codes (HC101), code prefixes (HC1, HC10), ALL, or rule names (guard-missing)"
_NAMES = {
    "sidecar-fields": ("attribute names holding sidecar transfers or hits", False),
    "io-ended": ("attribute or method names true once an operation's IO has ended", True),
    "allocation-fields": ("attribute names holding an operation's allocated hit, None before", True),
    "pools-ended": ("attribute or method names true once every pool transfer has ended", True),
}
IMPLEMENTATION_KEYS = ("method", "fenced", "guard", "commit", *_NAMES, "extra-pools")
KNOWN_KEYS = ("methods", "reduce-calls", "implementations", "commit-methods", *_NAMES, "pool-fields", "completion-flag",
              "select", "extend-select", "ignore", "enable", "disable", "per-file-ignores", "exclude",
              "extend-exclude", "respect-gitignore", "baseline", "fail-on-warnings")
_IMPL_ACCEPTED = ("'path/to/file.py::Class.method' or a table {method = '...', fenced = true, "
                  "guard = 'decision' | 'commit', commit = ['method', ...], sidecar-fields = ['field', ...], "
                  "io-ended = [...], allocation-fields = [...], pools-ended = [...], extra-pools = true}")


def _implementation(source: str, item: Any, defaults: dict[str, tuple[str, ...]]) -> Implementation:
    where = f"[tool.{SECTION}] implementations: entry {item!r}"
    table = {"method": item} if isinstance(item, str) else item
    if not isinstance(table, dict):
        raise LintConfigError(source, f"{where} is not valid; accepted: {_IMPL_ACCEPTED}")
    read = _Table(table, source, where + ":", "implementations.")
    read.check_keys(IMPLEMENTATION_KEYS)
    target = table.get("method")
    match = _IMPL.match(target) if isinstance(target, str) else None
    if match is None:
        raise LintConfigError(source, f"{where} is not valid; accepted: {_IMPL_ACCEPTED}")
    guard = table.get("guard")
    if "guard" in table and guard not in GUARD_PLACES:
        raise read.fail(f"guard = {guard!r}: expected one of " + ", ".join(GUARD_PLACES))
    commit = read.names("commit", (), "method names of the same class")
    if guard == "commit" and not commit:
        raise read.fail("guard = 'commit' needs commit = ['<method>', ...], the methods that commit or "
                        "release sidecar results")
    lists = {key.replace("-", "_"): read.names(key, defaults[key], accepted, allow_empty)
             for key, (accepted, allow_empty) in _NAMES.items()}
    return Implementation(match["path"], match["cls"], match["method"], read.boolean("fenced", False), guard,
                          commit, extra_pools=read.boolean("extra-pools", None), configured=True, **lists)


def _per_file_ignores(read: _Table) -> tuple[tuple[str, tuple[str, ...]], ...]:
    value = read.table.get("per-file-ignores", {})
    if not isinstance(value, dict):
        raise read.fail(f"per-file-ignores = {value!r}: expected a table of glob = [{_SELECTORS}]")
    out = []
    for pattern, codes in value.items():
        inner = _Table({pattern: codes}, read.source, f"{read.where} per-file-ignores:")
        out.append((pattern, inner.strings(pattern, (), _SELECTORS, SELECTOR, allow_empty=True)))
    return tuple(out)


def _selection(read: _Table) -> dict[str, Any]:
    for new, old in (("select", "enable"), ("ignore", "disable")):
        if new in read.table and old in read.table:
            raise read.fail(f"{old} is the older name of {new}; give one of them, not both")
    def selectors(key: str, default: Any) -> Any:
        return read.strings(key, default, _SELECTORS, SELECTOR, allow_empty=True)

    return {"select": selectors("enable", selectors("select", None)),
            "ignore": selectors("disable", selectors("ignore", ())),
            "extend_select": selectors("extend-select", ()), "per_file_ignores": _per_file_ignores(read)}


def from_table(table: Any, source: str, root: Path, config_path: Optional[Path]) -> Config:
    if not isinstance(table, dict):
        raise LintConfigError(source, f"[tool.{SECTION}] must be a table, got {table!r}")
    read = _Table(table, source, f"[tool.{SECTION}]")
    read.check_keys(KNOWN_KEYS)
    base = Config()
    lists = {key: read.names(key, getattr(base, key.replace("-", "_")), accepted, allow_empty)
             for key, (accepted, allow_empty) in _NAMES.items()}
    implementations = table.get("implementations", [])
    if not isinstance(implementations, list):
        raise read.fail(f"implementations = {implementations!r}: expected a list of {_IMPL_ACCEPTED}")
    baseline = table.get("baseline")
    if baseline is not None and not (isinstance(baseline, str) and baseline.strip()):
        raise read.fail(f"baseline = {baseline!r}: expected a file name (relative to this file)")
    globs = "glob patterns matched against paths relative to this file, e.g. 'vendor/' or '*_pb2.py'"
    return Config(
        methods=read.names("methods", base.methods, "method names", allow_empty=False),
        reduce_calls=read.strings(
            "reduce-calls", base.reduce_calls,
            "dotted call names matched against the end of the call, e.g. 'all_reduce' or 'dist.all_reduce'",
            _DOTTED),
        implementations=tuple(_implementation(source, item, lists) for item in implementations),
        commit_methods=read.names("commit-methods", base.commit_methods,
                                  "method names that commit or release prefetch results (an ACK drain)"),
        pool_fields=read.names("pool-fields", base.pool_fields,
                               "names (or parts of names) that bring extra-pool transfers into a class"),
        completion_flag=read.name("completion-flag", base.completion_flag,
                                  "the attribute set once every extra-pool transfer ended, e.g. 'pool_transfers_done'"),
        exclude=read.strings("exclude", base.exclude, globs, allow_empty=True),
        extend_exclude=read.strings("extend-exclude", (), globs, allow_empty=True),
        respect_gitignore=read.boolean("respect-gitignore", True),
        baseline=root / baseline if baseline else None,
        fail_on_warnings=read.boolean("fail-on-warnings", False),
        root=root, source=config_path,
        **{key.replace("-", "_"): value for key, value in lists.items()}, **_selection(read),
    )


def read_toml(path: Path, display: str) -> dict:
    if toml is None:  # pragma: no cover
        raise LintConfigError(display, "reading TOML needs Python >= 3.11 or the 'tomli' package")
    try:
        with path.open("rb") as handle:
            return toml.load(handle)
    except OSError as exc:
        raise LintConfigError(display, f"cannot read configuration: {exc.strerror or exc}") from None
    except toml.TOMLDecodeError as exc:
        raise LintConfigError(display, f"invalid TOML: {exc}") from None


def config_at(path: Path, shown: str) -> Optional[Config]:
    """The configuration in the file's [tool.hicache-lint] table, rooted at its folder; None when it has
    none. `shown`: the file as errors name it."""
    tool = read_toml(path, shown).get("tool")
    table = tool.get(SECTION) if isinstance(tool, dict) else None
    return None if table is None else from_table(table, shown, path.parent, path)


def load_file(path: Path) -> Config:
    """Load an explicitly named configuration file (`--config`)."""
    if not path.is_file():
        raise LintConfigError(str(path), "configuration file not found")
    found = config_at(path.resolve(), str(path))
    if found is None:
        raise LintConfigError(str(path), f"no [tool.{SECTION}] table in this file")
    return found


def repo_root(start: Path) -> Optional[Path]:
    """The nearest directory at or above `start` holding `.git` (a folder, or a worktree's file)."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def _table_at(candidate: Path) -> Optional[Config]:
    return config_at(candidate, str(candidate)) if candidate.is_file() else None


def walk_up(start: Path, memo: dict[Path, Optional[Config]]) -> Optional[Config]:
    """The first pyproject.toml with our table at or above `start` (`memo`: per directory, for many paths)."""
    for directory in (start, *start.parents):
        if directory not in memo:
            memo[directory] = _table_at(directory / "pyproject.toml")
        if memo[directory] is not None:
            return memo[directory]
    return None


def _below_root(root: Path) -> Optional[Config]:
    found = [c for c in (_table_at(p) for p in sorted(root.glob("*/pyproject.toml"))) if c is not None]
    if len(found) > 1:
        names = ", ".join(str(c.source) for c in found)
        raise LintConfigError(str(root), f"several pyproject.toml files below the repository root have a "
                                     f"[tool.{SECTION}] table ({names}); pass --config to choose one")
    return found[0] if found else None


def find(paths: Iterable[str], cwd: Optional[Path] = None) -> Config:
    """The configuration for linting `paths` from `cwd`."""
    cwd = (cwd or Path.cwd()).resolve()
    chosen: Optional[Config] = None
    memo: dict[Path, Optional[Config]] = {}
    for raw in paths:
        path = Path(os.path.abspath(cwd / raw))  # not resolved: a link loop is reported later, as input
        found = walk_up(path if path.is_dir() else path.parent, memo)
        if found is None:
            continue
        if chosen is not None and found.source != chosen.source:
            raise LintConfigError(str(found.source), (
                f"the paths given fall under two [tool.{SECTION}] tables ({chosen.source} and "
                f"{found.source}); lint them in separate runs, or pass --config"))
        chosen = chosen or found
    if chosen is not None:
        return chosen
    found = walk_up(cwd, memo)
    if found is not None:
        return found
    root = repo_root(cwd)
    if root is not None:
        found = _below_root(root)
        if found is not None:
            return found
    return Config(root=root or cwd)

"""`[tool.hicache-lint]` configuration: defaults, discovery and validation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

try:  # Python >= 3.11
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 needs the backport
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]

SECTION = "hicache-lint"
DEFAULT_METHODS = ("can_terminate_prefetch",)
DEFAULT_REDUCE_CALLS = ("all_reduce", "all_reduce_max", "all_reduce_min")
KNOWN_KEYS = ("methods", "reduce-calls", "implementations", "enable", "disable", "fail-on-warnings")
IMPLEMENTATION_KEYS = ("method", "fenced", "guard", "commit", "sidecar-fields", "io-ended", "allocation-fields")
GUARD_PLACES = ("decision", "commit")
DEFAULT_SIDECAR_FIELDS = ("pool_transfers",)
DEFAULT_IO_ENDED = ("completed_req",)  # SGLang 0.5.2x: the final prefetch ACK
DEFAULT_ALLOCATION_FIELDS = ("host_indices",)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IMPL = re.compile(r"^(?P<path>[^:]+)::(?P<cls>[A-Za-z_][\w.]*)\.(?P<method>[A-Za-z_]\w*)$")


class ConfigError(ValueError):
    """Invalid configuration; the message names the field, the value and what is accepted."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: error: {message}")
        self.source = source
        self.message = message


@dataclass(frozen=True)
class Implementation:
    """One configured implementation of the protocol.

    fenced: its commit clamps to every pool (F3) and frees slots only after
    their IO ends (F5), so the guard may take the spec's completion form.
    guard: where the pool_transfers_done check must live: "decision" (the
    decision method) or "commit" (the methods named in `commit`, which commit
    or release sidecar results; the 0.5.2x ACK-drain shape).
    """

    path: str  # relative to the configuration root
    class_qualname: str
    method: str
    fenced: bool = False
    guard: str = "decision"
    commit: tuple[str, ...] = ()
    sidecar_fields: tuple[str, ...] = DEFAULT_SIDECAR_FIELDS
    io_ended: tuple[str, ...] = DEFAULT_IO_ENDED
    allocation_fields: tuple[str, ...] = DEFAULT_ALLOCATION_FIELDS

    def __str__(self) -> str:
        return f"{self.path}::{self.class_qualname}.{self.method}"


@dataclass(frozen=True)
class Config:
    methods: tuple[str, ...] = DEFAULT_METHODS
    reduce_calls: tuple[str, ...] = DEFAULT_REDUCE_CALLS
    implementations: tuple[Implementation, ...] = ()
    enable: Optional[frozenset[str]] = None  # None: every rule
    disable: frozenset[str] = frozenset()
    fail_on_warnings: bool = False
    root: Path = field(default_factory=Path.cwd)
    source: Optional[Path] = None

    def enabled(self, code: str) -> bool:
        if code in self.disable:
            return False
        return self.enable is None or code in self.enable

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


def _string_list(source: str, key: str, value: Any, accepted: str, pattern: Optional[re.Pattern] = None,
                 allow_empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(source, f"[tool.{SECTION}] {key} = {value!r}: expected a list of strings ({accepted})")
    if not value and not allow_empty:
        raise ConfigError(source, f"[tool.{SECTION}] {key} = []: expected at least one entry ({accepted})")
    if pattern is not None:
        for item in value:
            if not pattern.match(item):
                raise ConfigError(source, f"[tool.{SECTION}] {key}: entry {item!r} is not valid; accepted: {accepted}")
    return tuple(value)


def _codes(source: str, key: str, value: Any) -> frozenset[str]:
    from lint.rules import RULES_BY_CODE, RULES_BY_NAME

    accepted = "rule codes " + ", ".join(sorted(RULES_BY_CODE)) + " or their names"
    items = _string_list(source, key, value, accepted, allow_empty=True)
    codes: set[str] = set()
    for item in items:
        if item in RULES_BY_CODE:
            codes.add(item)
        elif item in RULES_BY_NAME:
            codes.add(RULES_BY_NAME[item].code)
        else:
            raise ConfigError(source, f"[tool.{SECTION}] {key}: unknown rule {item!r}; accepted: {accepted}")
    return frozenset(codes)


_IMPL_ACCEPTED = ("'path/to/file.py::Class.method' or a table {method = '...', fenced = true, "
                  "guard = 'decision' | 'commit', commit = ['method', ...], sidecar-fields = ['field', ...], "
                  "io-ended = ['attribute', ...], allocation-fields = ['field', ...]}")


def _implementations(source: str, value: Any) -> tuple[Implementation, ...]:
    key = "implementations"
    if not isinstance(value, list):
        raise ConfigError(source, f"[tool.{SECTION}] {key} = {value!r}: expected a list of {_IMPL_ACCEPTED}")
    return tuple(_implementation(source, item) for item in value)


def _implementation(source: str, item: Any) -> Implementation:
    where = f"[tool.{SECTION}] implementations: entry {item!r}"
    table = {"method": item} if isinstance(item, str) else item
    if not isinstance(table, dict):
        raise ConfigError(source, f"{where} is not valid; accepted: {_IMPL_ACCEPTED}")
    for name in table:
        if name not in IMPLEMENTATION_KEYS:
            raise ConfigError(source, f"{where}: unknown key {name!r}; accepted keys: "
                                      + ", ".join(IMPLEMENTATION_KEYS))
    target = table.get("method")
    match = _IMPL.match(target) if isinstance(target, str) else None
    if match is None:
        raise ConfigError(source, f"{where} is not valid; accepted: {_IMPL_ACCEPTED}")
    fenced = table.get("fenced", False)
    if not isinstance(fenced, bool):
        raise ConfigError(source, f"{where}: fenced = {fenced!r}: expected true or false")
    guard = table.get("guard", "decision")
    if guard not in GUARD_PLACES:
        raise ConfigError(source, f"{where}: guard = {guard!r}: expected one of " + ", ".join(GUARD_PLACES))
    commit = _string_list(source, "implementations.commit", table.get("commit", []),
                          "method names of the same class", _IDENT, allow_empty=True)
    if guard == "commit" and not commit:
        raise ConfigError(source, f"{where}: guard = 'commit' needs commit = ['<method>', ...], the methods "
                                  "that commit or release sidecar results")
    sidecar = _string_list(source, "implementations.sidecar-fields",
                           table.get("sidecar-fields", list(DEFAULT_SIDECAR_FIELDS)),
                           "attribute names holding sidecar transfers or hits", _IDENT)
    io_ended = _string_list(source, "implementations.io-ended", table.get("io-ended", list(DEFAULT_IO_ENDED)),
                            "attribute or method names true once an operation's IO has ended", _IDENT,
                            allow_empty=True)
    allocation = _string_list(source, "implementations.allocation-fields",
                              table.get("allocation-fields", list(DEFAULT_ALLOCATION_FIELDS)),
                              "attribute names holding an operation's allocated hit, None before", _IDENT,
                              allow_empty=True)
    return Implementation(match["path"], match["cls"], match["method"], fenced, guard, commit, sidecar,
                          io_ended, allocation)


def from_table(table: Any, source: str, root: Path, config_path: Optional[Path]) -> Config:
    if not isinstance(table, dict):
        raise ConfigError(source, f"[tool.{SECTION}] must be a table, got {table!r}")
    for key in table:
        if key not in KNOWN_KEYS:
            raise ConfigError(
                source,
                f"[tool.{SECTION}] unknown key {key!r} (value {table[key]!r}); accepted keys: "
                + ", ".join(KNOWN_KEYS),
            )
    kwargs: dict[str, Any] = {"root": root, "source": config_path}
    if "methods" in table:
        kwargs["methods"] = _string_list(source, "methods", table["methods"], "method names", _IDENT)
    if "reduce-calls" in table:
        kwargs["reduce_calls"] = _string_list(
            source, "reduce-calls", table["reduce-calls"],
            "dotted call names matched against the end of the call, e.g. 'all_reduce' or 'dist.all_reduce'",
            _DOTTED,
        )
    if "implementations" in table:
        kwargs["implementations"] = _implementations(source, table["implementations"])
    if "enable" in table:
        kwargs["enable"] = _codes(source, "enable", table["enable"])
    if "disable" in table:
        kwargs["disable"] = _codes(source, "disable", table["disable"])
    if "fail-on-warnings" in table:
        value = table["fail-on-warnings"]
        if not isinstance(value, bool):
            raise ConfigError(source, f"[tool.{SECTION}] fail-on-warnings = {value!r}: expected true or false")
        kwargs["fail_on_warnings"] = value
    return Config(**kwargs)


def _read_toml(path: Path, display: str) -> dict:
    if _toml is None:  # pragma: no cover
        raise ConfigError(display, "reading TOML needs Python >= 3.11 or the 'tomli' package")
    try:
        with path.open("rb") as handle:
            return _toml.load(handle)
    except OSError as exc:
        raise ConfigError(display, f"cannot read configuration: {exc.strerror or exc}") from None
    except _toml.TOMLDecodeError as exc:
        raise ConfigError(display, f"invalid TOML: {exc}") from None


def load_file(path: Path) -> Config:
    """Load an explicitly named configuration file (`--config`)."""
    display = str(path)
    if not path.is_file():
        raise ConfigError(display, "configuration file not found")
    data = _read_toml(path, display)
    table = data.get("tool", {}).get(SECTION) if isinstance(data.get("tool"), dict) else None
    if table is None:
        raise ConfigError(display, f"no [tool.{SECTION}] table in this file")
    return from_table(table, display, path.resolve().parent, path.resolve())


def discover(start: Optional[Path] = None) -> Config:
    """Walk up from `start` (the cwd) to the first pyproject.toml with our table."""
    start = (start or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            data = _read_toml(candidate, str(candidate))
            tool = data.get("tool")
            if isinstance(tool, dict) and SECTION in tool:
                return from_table(tool[SECTION], str(candidate), directory, candidate)
    return Config(root=start)

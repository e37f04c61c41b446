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
KNOWN_KEYS = ("methods", "reduce-calls", "implementations", "enable", "disable")

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
    path: str  # relative to the configuration root
    class_qualname: str
    method: str

    def __str__(self) -> str:
        return f"{self.path}::{self.class_qualname}.{self.method}"


@dataclass(frozen=True)
class Config:
    methods: tuple[str, ...] = DEFAULT_METHODS
    reduce_calls: tuple[str, ...] = DEFAULT_REDUCE_CALLS
    implementations: tuple[Implementation, ...] = ()
    enable: Optional[frozenset[str]] = None  # None: every rule
    disable: frozenset[str] = frozenset()
    root: Path = field(default_factory=Path.cwd)
    source: Optional[Path] = None

    def enabled(self, code: str) -> bool:
        if code in self.disable:
            return False
        return self.enable is None or code in self.enable


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
        items = _string_list(source, "implementations", table["implementations"],
                             "'path/to/file.py::Class.method'", _IMPL, allow_empty=True)
        impls = []
        for item in items:
            match = _IMPL.match(item)
            assert match is not None
            impls.append(Implementation(match["path"], match["cls"], match["method"]))
        kwargs["implementations"] = tuple(impls)
    if "enable" in table:
        kwargs["enable"] = _codes(source, "enable", table["enable"])
    if "disable" in table:
        kwargs["disable"] = _codes(source, "disable", table["disable"])
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

"""Per-implementation expected failures, each with a reason.

Sources, for every implementation under test:
  conformance/plugin/expected_failures/<impl>.toml   (shipped with the suite)
  the adapter's optional `expected_failures` attribute (third-party adapters)
  --expected-failures PATH                    (entries name `impl`, default: the file's stem)

TOML form:
  [[xfail]]
  test = "test_name"            # or "test_name[param-glob]", glob over the whole id
  clause = "S1"                 # optional: only tests citing this clause
  reason = "why it fails"       # required
A matching test is marked xfail(strict=True): if it starts passing, the run
fails until the entry goes. An entry that matches no collected test is stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from spec.clauses import CATALOGUE
from spec.errors import ConfigError

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]

BUILTIN_DIR = Path(__file__).with_name("expected_failures")
ENTRY_KEYS = {"test", "reason", "clause", "impl"}


@dataclass(frozen=True)
class ExpectedFailure:
    impl: str
    test: str
    reason: str
    clause: str | None
    source: str

    @property
    def key(self) -> str:
        """Identity that survives the trip from an xdist worker to the controller."""
        return "\x1f".join((self.impl, self.test, self.clause or "", self.source))

    @property
    def name_pattern(self) -> str:
        return self.test.partition("[")[0]

    @property
    def param_pattern(self) -> str | None:
        name, bracket, rest = self.test.partition("[")
        return rest[:-1] if bracket else None

    def matches(self, original_name: str, param_id: str | None, clauses: Iterable[str]) -> bool:
        if not fnmatchcase(original_name, self.name_pattern):
            return False
        if self.param_pattern is not None and (param_id is None or not fnmatchcase(param_id, self.param_pattern)):
            return False
        return self.clause is None or self.clause in clauses

    def as_json(self, matched: bool) -> dict:
        return {"impl": self.impl, "test": self.test, "reason": self.reason, "matched": matched}


def parse_entry(raw: Any, *, default_impl: str | None, source: str) -> ExpectedFailure:
    where = f"expected failure in {source}"
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "a table with test and reason (clause, impl optional)")
    unknown = sorted(set(raw) - ENTRY_KEYS)
    if unknown:
        raise ConfigError(f"{where} keys", unknown, ", ".join(sorted(ENTRY_KEYS)))
    test = raw.get("test")
    if not isinstance(test, str) or not test.strip():
        raise ConfigError(f"{where}: test", test, "a test name, or 'test_name[param-glob]'")
    if "[" in test and not test.endswith("]"):
        raise ConfigError(f"{where}: test", test, "'test_name[param-glob]' with a closing ']'")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError(f"{where} for {test!r}: reason", reason, "a non-empty string saying why it fails")
    clause = raw.get("clause")
    if clause is not None and clause not in CATALOGUE:
        raise ConfigError(f"{where} for {test!r}: clause", clause, "a clause ID of spec.clauses.CATALOGUE")
    impl = raw.get("impl", default_impl)
    if not isinstance(impl, str) or not impl:
        raise ConfigError(f"{where} for {test!r}: impl", impl, "an adapter name")
    return ExpectedFailure(impl=impl, test=test.strip(), reason=reason.strip(), clause=clause, source=source)


def load_file(path: Path) -> list[ExpectedFailure]:
    """Entries of one TOML file; `impl` defaults to the file's stem."""
    if _toml is None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("--expected-failures", str(path), f"a readable file ({exc.strerror})") from None
        if all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
            return []  # nothing but comments: no TOML parser needed
        raise ConfigError("expected-failures reader", str(path), "Python >= 3.11 or the 'tomli' package")
    try:
        with open(path, "rb") as handle:
            document = _toml.load(handle)
    except OSError as exc:
        raise ConfigError("--expected-failures", str(path), f"a readable file ({exc.strerror})") from None
    except _toml.TOMLDecodeError as exc:
        raise ConfigError("--expected-failures", str(path), f"valid TOML ({exc})") from None
    extra = sorted(set(document) - {"xfail"})
    if extra:
        raise ConfigError(f"tables in {path}", extra, "only [[xfail]] entries")
    entries = document.get("xfail", [])
    if not isinstance(entries, list):
        raise ConfigError(f"xfail in {path}", entries, "an array of tables ([[xfail]])")
    return [parse_entry(raw, default_impl=path.stem, source=str(path)) for raw in entries]


def collect(adapters: Sequence[Any], extra_paths: Sequence[str | Path], builtin_dir: Path = BUILTIN_DIR) -> list[ExpectedFailure]:
    """Every entry for the adapters under test, in a fixed order (same on every xdist worker)."""
    names = {adapter.name for adapter in adapters}
    entries: list[ExpectedFailure] = []
    for adapter in adapters:
        shipped = builtin_dir / f"{adapter.name}.toml"
        if shipped.is_file():
            entries += load_file(shipped)
        raw_entries = getattr(adapter, "expected_failures", None) or ()
        if isinstance(raw_entries, (str, bytes, Mapping)):
            raise ConfigError(f"adapter {adapter.name} expected_failures", raw_entries, "a list of mappings")
        entries += [parse_entry(raw, default_impl=adapter.name, source=f"adapter {adapter.name}") for raw in raw_entries]
    for path in extra_paths:
        entries += load_file(Path(path))
    # Entries for implementations not under test cannot match; they are neither applied nor stale.
    return [entry for entry in entries if entry.impl in names]


def param_id(item_name: str) -> str | None:
    """'test_x[hiradix-cpu-timeout]' -> 'hiradix-cpu-timeout'."""
    _, bracket, rest = item_name.partition("[")
    return rest[:-1] if bracket else None


class Expectations:
    """The entries in force for one session, and which of them matched a collected test."""

    def __init__(self, entries: Sequence[ExpectedFailure]) -> None:
        self.entries = list(entries)
        self.matched: set[str] = set()

    def find(self, impl: str, original_name: str, item_name: str, clauses: Iterable[str]) -> ExpectedFailure | None:
        """The first entry for this test (every matching entry counts as matched)."""
        clauses = set(clauses)
        params = param_id(item_name)
        first = None
        for entry in self.entries:
            if entry.impl == impl and entry.matches(original_name, params, clauses):
                self.matched.add(entry.key)
                first = first or entry
        return first

    def report(self, matched_keys: Iterable[str]) -> tuple[list[dict], list[dict]]:
        """(all entries, stale entries) as JSON rows."""
        matched = set(matched_keys)
        rows = [entry.as_json(entry.key in matched) for entry in self.entries]
        return rows, [row for row in rows if not row["matched"]]

    def stale(self, matched_keys: Iterable[str]) -> list[ExpectedFailure]:
        matched = set(matched_keys)
        return [entry for entry in self.entries if entry.key not in matched]

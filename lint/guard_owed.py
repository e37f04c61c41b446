"""HC101-HC103 stand only where a guard is owed (see lint/pools.py); each then
names its evidence, and where the configuration expects extra pools that the
code does not show, an HC109 note takes their place."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from lint.findings import Finding
from lint.pools import DefinitionSearch, Evidence, FlagSearch
from lint.rules.pools_unseen import PoolsUnseen

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

OWED_CODES = frozenset({"HC101", "HC102", "HC103"})


def _note(method: "MethodAnalysis", pools: Optional[Evidence], flag: Optional[Evidence]) -> Finding:
    missing = []
    if pools is None:
        missing.append("no line of the class, the module functions it calls or its base classes brings "
                       "extra-pool transfers in")
    if flag is None:
        missing.append(f"no '{method.flag}' flag exists in the linted files, the configured implementations or "
                       "the project tree")
    return PoolsUnseen.finding(
        method, method.def_line, method.def_col,
        f"{method.qualname} is configured with extra-pools = true, but {' and '.join(missing)}: its "
        f"pool-transfer guard is not checked until both exist")


def _lookalikes(method: "MethodAnalysis", names: DefinitionSearch) -> str:
    """Where each flag-like name HC101 reads is defined, if anywhere searched."""
    parts = []
    for name, _ in method.lookalikes:
        found = names.find(name, method.path, method.lines)
        parts.append(found.describe() if found is not None else
                     f"nothing in the linted files, the configured implementations or the project tree "
                     f"defines '{name}'")
    return "".join(f"; {part}" for part in parts)


def _renamed(method: "MethodAnalysis", pools: Optional[Evidence], flag: Optional[Evidence],
             names: Optional[DefinitionSearch]) -> Optional[Evidence]:
    """For a configured implementation whose pools are seen and whose flag is not: where a name
    like the flag is bound instead (a flag that never existed stays a note, HC109)."""
    impl = method.implementation
    if pools is None or flag is not None or names is None or impl is None or not impl.configured:
        return None
    return names.renamed(method.flag, method.path, method.lines)


def owed(findings: list[Finding], method: "MethodAnalysis", flags: FlagSearch,
         names: Optional[DefinitionSearch] = None) -> list[Finding]:
    """`findings` with HC101-HC103 kept (and their evidence named) only where a guard is owed."""
    gated = [f for f in findings if f.code in OWED_CODES]
    if not gated:
        return findings
    kept = [f for f in findings if f.code not in OWED_CODES]
    pools = method.pools
    flag = flags.find() if pools is not None else None

    def owed_with(evidence: str) -> list[Finding]:
        also = _lookalikes(method, names) if names is not None and method.lookalikes else ""
        return kept + [replace(f, evidence=evidence + (also if f.code == "HC101" else "")) for f in gated]

    if pools is not None and flag is not None:
        return owed_with(f"extra pools: {pools.describe()}; their completion flag: {flag.describe()}")
    renamed = _renamed(method, pools, flag, names)
    if renamed is not None:
        # the class still has its pools and the flag is gone, but a name like it is bound: renamed.
        # That fails the run, or renaming the flag everywhere would turn every guard check off.
        return owed_with(f"extra pools: {pools.describe()}; its completion flag '{method.flag}' (completion-flag) "
                         f"is defined and read nowhere in the linted files, the configured implementations or "
                         f"the project tree, and {renamed.describe()}: if the flag was renamed, set "
                         f"completion-flag to the new name")
    if method.implementation is not None and method.implementation.extra_pools:
        kept.append(_note(method, pools, flag if pools is not None else flags.find()))
    return kept

"""One file's analysis: its termination methods parsed with libcst and analyzed,
the implementation each is (configured or recognized), its commit path, and
the line that brings extra pools into its class.

Which of upstream's two architectures a decision method belongs to: the
fork's vote per check (`can_terminate_prefetch` computes KV completion, votes,
and reduces the vote; its pool-transfer guard lives there: HC101-HC103,
HC107), or SGLang 0.5.2x's ACK drain (the decision votes only the timeout, it
never reads completion, and an ACK drain commits what landed; the guard lives
in the commit methods: HC108). A class is taken for the second when its
decision reads no completion and it defines one of the commit methods; a
configured `guard` decides instead.

The linter imports this module only for a file that holds a candidate method,
so that a run (or `--version`) that finds none never loads libcst.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Union

import libcst as cst

from lint.analysis import MethodAnalysis, analyze_method
from lint.analysis.commit import analyze_commit
from lint.analysis.commit_state import Signals
from lint.config import Config, Implementation
from lint.cstutil import reads_completion
from lint.errors import LintError
from lint.findings import FileError
from lint.locate import MethodSite, class_sites
from lint.pools import ClassPools
from lint.source import SourceFile
from lint.unit import ParsedMethod, WholeModule, parse_in_module, parse_snippet


@dataclass
class FileAnalysis:
    source: SourceFile
    methods: list[MethodAnalysis]
    path: Optional[Path]  # on disk (None: text given directly)

    def release(self) -> None:
        """Keep only what the report needs: lines (suppressions, columns), not trees or text."""
        self.source.tree = None  # type: ignore[assignment]
        self.source.text = ""
        for method in self.methods:
            method.release()


class Unparsable(LintError):
    pass


def _parse_site(source: SourceFile, site: MethodSite, whole: WholeModule, force_whole: bool = False) -> ParsedMethod:
    unit = None if force_whole else parse_snippet(source.lines, site)
    if unit is None:
        found = parse_in_module(whole, site)
        if isinstance(found, str):
            raise Unparsable(found)
        unit = found
    return unit


def _parse_sites(source: SourceFile, sites: list[MethodSite], whole: WholeModule, force_whole: bool) -> list[ParsedMethod]:
    parsed = [_parse_site(source, site, whole, force_whole) for site in sites]
    if not force_whole and len(parsed) > 1 and any(p.prefix is None for p in parsed):
        # one parse mode per file, so that fixes apply in a single pass
        return _parse_sites(source, sites, whole, True)
    return parsed


def _class_methods(source: SourceFile, site: MethodSite, whole: WholeModule
                   ) -> tuple[Callable[[str], ParsedMethod], dict[str, MethodSite]]:
    """The site's class's methods, each parsed when first asked for, and where each is."""
    sites = class_sites(site)
    parsed = functools.lru_cache(maxsize=None)(lambda name: _parse_site(source, sites[name], whole))
    return parsed, sites


def implementation(config: Config, configured: Optional[Implementation], display: str,
                   site: MethodSite, decision: cst.FunctionDef) -> Optional[Implementation]:
    """The implementation this method is: as configured, or recognized as an ACK drain (None: a plain decision)."""
    if configured is not None and configured.guard is not None:
        return configured
    listed = configured.commit if configured is not None and configured.commit else ()
    present = listed or tuple(n for n in config.commit_methods if n in site.index.methods)
    if present and not reads_completion(decision):
        base = configured or config.recognized(display, site.class_qualname, site.method)
        return replace(base, guard="commit", commit=present)
    return replace(configured, guard="decision") if configured is not None else None


def analyze(source: SourceFile, sites: list[MethodSite], config: Config, path: Optional[Path],
            class_pools: ClassPools) -> Union[FileAnalysis, FileError]:
    try:
        return _analyze(source, sites, config, path, class_pools)
    except cst.ParserSyntaxError as exc:
        return FileError(source.display, f"libcst cannot parse this file: {exc.message}")
    except Unparsable as exc:
        return FileError(source.display, str(exc))


def _analyze(source: SourceFile, sites: list[MethodSite], config: Config, path: Optional[Path],
             class_pools: ClassPools) -> FileAnalysis:
    whole = WholeModule(source.text)
    parsed = _parse_sites(source, sites, whole, False)
    where = path or Path(source.display)
    methods = []
    for unit in parsed:
        method = analyze_method(unit, source.display, config.reduce_calls, source.lines, config.completion_flag)
        site = unit.site
        impl = implementation(config, config.implementation_for(where, site.class_qualname), source.display, site,
                              unit.func)
        method.implementation = impl
        if impl is not None and impl.guard == "commit":
            signals = Signals(frozenset(impl.io_ended), frozenset(impl.allocation_fields),
                              frozenset(impl.pools_ended), config.completion_flag)
            method.commit = analyze_commit(*_class_methods(source, site, whole), impl.commit, impl.sidecar_fields,
                                           signals)
        else:
            method.pools = class_pools.find(source.tree, source.lines, where, site.class_qualname, skip=site.method)
        methods.append(method)
    return FileAnalysis(source, methods, path)

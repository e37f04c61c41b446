"""One file's analysis: its termination methods parsed with libcst and analyzed,
the implementation each is (configured or recognized), its commit path, and
the line that brings extra pools into its class.

The linter imports this module only for a file that holds a candidate method,
so that a run (or `--version`) that finds none never loads libcst.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import libcst as cst

from lint.analysis import MethodAnalysis, analyze_method
from lint.analysis.commit import analyze_commit
from lint.analysis.commit_state import Signals
from lint.architecture import implementation
from lint.config import Config
from lint.errors import LintError
from lint.findings import FileError
from lint.locate import MethodSite
from lint.pools import ClassPools
from lint.source import SourceFile, display_path
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


def _parse_sites(source: SourceFile, sites: list[MethodSite], force_whole: bool) -> list[ParsedMethod]:
    whole = WholeModule(source.text)
    parsed: list[ParsedMethod] = []
    for site in sites:
        unit = None if force_whole else parse_snippet(source.lines, site)
        if unit is None:
            found = parse_in_module(whole, site)
            if isinstance(found, str):
                raise Unparsable(found)
            unit = found
        parsed.append(unit)
    if not force_whole and len(parsed) > 1 and any(p.prefix is None for p in parsed):
        # one parse mode per file, so that fixes apply in a single pass
        return _parse_sites(source, sites, True)
    return parsed


def analyze(source: SourceFile, sites: list[MethodSite], config: Config, path: Optional[Path] = None,
            class_pools: Optional[ClassPools] = None) -> Union[FileAnalysis, FileError]:
    try:
        parsed = _parse_sites(source, sites, False)
    except cst.ParserSyntaxError as exc:
        return FileError(source.display, f"libcst cannot parse this file: {exc.message}")
    except Unparsable as exc:
        return FileError(source.display, str(exc))
    where = path or Path(source.display)
    class_pools = class_pools or ClassPools(config.pool_fields, display_path, config.completion_flag)
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
            method.commit = analyze_commit(site.index, impl.commit, impl.sidecar_fields, signals)
        else:
            method.pools = class_pools.find(source.tree, source.lines, where, site.class_qualname, skip=site.method)
        methods.append(method)
    return FileAnalysis(source, methods, path)

"""Parse one located method with libcst, mapping positions back to the file.

Parsing only the method keeps libcst's (slow) parse and position pass off the
rest of a long file. The method text is dedented by its own indentation; if
any line of it is less indented (a multi-line string, say) the whole module is
parsed instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Union

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from lint.locate import MethodSite

FunctionDef = cst.FunctionDef


@dataclass
class ParsedMethod:
    site: MethodSite
    func: FunctionDef
    module: cst.Module
    positions: Mapping[cst.CSTNode, CodeRange]
    line_offset: int
    col_offset: int
    prefix: Optional[str]  # indentation removed from each line; None: whole module

    def loc(self, node: cst.CSTNode) -> tuple[int, int]:
        """(line, 1-based column) of `node` in the file."""
        start = self.positions[node].start
        return start.line + self.line_offset, start.column + self.col_offset + 1

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line + self.line_offset


def _dedent(lines: list[str], prefix: str) -> Optional[list[str]]:
    out: list[str] = []
    for line in lines:
        if not line.strip():
            out.append(line)
        elif line.startswith(prefix):
            out.append(line[len(prefix):])
        else:
            return None
    return out


def reindent(code: str, prefix: str) -> list[str]:
    return [line if not line.strip() else prefix + line for line in code.splitlines(keepends=True)]


def method_lines(lines: list[str], site: MethodSite) -> list[str]:
    chunk = lines[site.first_line - 1 : site.end_line]
    if chunk and not chunk[-1].endswith(("\n", "\r")):
        chunk[-1] += "\n"
    return chunk


def parse_snippet(lines: list[str], site: MethodSite) -> Optional[ParsedMethod]:
    def_line = lines[site.def_line - 1]
    prefix = def_line[: len(def_line) - len(def_line.lstrip())]
    dedented = _dedent(method_lines(lines, site), prefix)
    if dedented is None:
        return None
    module = cst.parse_module("".join(dedented))
    funcs = [n for n in module.body if isinstance(n, FunctionDef)]
    if len(funcs) != 1:
        return None
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    return ParsedMethod(site, funcs[0], module, positions, site.first_line - 1, len(prefix), prefix)


class WholeModule:
    """Lazily parsed whole module, shared by every fallback method in a file."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._module: Optional[cst.Module] = None
        self._positions: Optional[Mapping[cst.CSTNode, CodeRange]] = None

    def get(self) -> tuple[cst.Module, Mapping[cst.CSTNode, CodeRange]]:
        if self._module is None:
            self._module = cst.parse_module(self.text)
            wrapper = MetadataWrapper(self._module, unsafe_skip_copy=True)
            self._positions = wrapper.resolve(PositionProvider)
        assert self._positions is not None
        return self._module, self._positions


def parse_in_module(whole: WholeModule, site: MethodSite) -> Union[ParsedMethod, str]:
    module, positions = whole.get()
    for node in _iter_functions(module):
        if node.name.value == site.method and positions[node.name].start.line == site.def_line:
            return ParsedMethod(site, node, module, positions, 0, 0, None)
    return f"method {site.qualname} at line {site.def_line} not found by libcst"


def _iter_functions(module: cst.Module):
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, FunctionDef):
            yield node
            continue
        stack.extend(node.children)

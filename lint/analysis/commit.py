"""The commit path of an implementation whose pool-transfer check lives there.

SGLang's 0.5.2x UnifiedRadixCache decides to stop on the timeout alone and
commits through an ACK drain: `pool_transfers_done` then decides which sidecar
hits are inserted into the tree or released to their pools. Inputs: the
class's methods (each parsed with libcst when the walk reaches it), the
configured commit methods, sidecar field names and state signals
(commit_state.Signals). Output:
every place a sidecar result is handed on (committed or released) in a state
where a read may still be writing it, and whether the commit path checks the
flag at all.

The commit methods are walked with what each path knows (commit_state.State);
same-class helpers and functions nested in a walked function are followed
where they are called (conditions included), with the caller's state.

A sidecar *value* is a read of a sidecar field, a local or loop variable bound
to one, its elements, its slots (an `allocation-fields` attribute of an
element), a method result of one, or a collection built from them. It is
*handed on* when passed to a call, stored into a subscript or attribute, or
returned. Tests, `len()`-style inspections, logging, and reads of an
element's other attributes (names, keys, policies) only look at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Optional

import libcst as cst

from lint.analysis.commit_state import Signals, State, is_constant, positional, reads_done
from lint.cstutil import attribute_read, children, is_name, operands, string_value, walk
from lint.locate import ClassIndex, MethodSite
from lint.unit import ParsedMethod

_INSPECT = frozenset({"len", "bool", "isinstance", "print", "repr", "str", "id", "hash", "type", "getattr",
                      "hasattr", "any", "all", "sum", "min", "max"})
_PASS_THROUGH = frozenset({"list", "tuple", "set", "frozenset", "dict", "sorted", "reversed", "iter"})
_COLLECTS = frozenset({"append", "extend", "add", "update", "insert", "appendleft", "setdefault"})
_LOGGERS = ("logger", "logging", "log")
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)

# A function the walk follows, with the parsed method that holds it (its positions in the file).
Function = tuple[cst.FunctionDef, ParsedMethod]


@dataclass(frozen=True)
class SidecarUse:
    method: str  # the commit method it is reached from
    line: int
    col: int  # 1-based
    what: str  # the sidecar value handed on
    where: str  # the function it is in (a helper or nested function), or "" for the commit method
    called_at: int  # the line that function is called at (0 for the commit method)
    why: str
    sets_flag: bool = False  # the flag is set here, not a sidecar handed on


@dataclass
class CommitPath:
    methods: list[str]  # the configured commit methods found in the class
    missing: list[str]  # configured commit methods the class does not define
    checks_done: bool  # some commit method (or helper it calls) reads pool_transfers_done
    unguarded: list[SidecarUse] = field(default_factory=list)
    sites: dict[str, MethodSite] = field(default_factory=dict)  # of each commit method found: its lines, its suppressions


def _nested(function: Function) -> dict[str, Function]:
    func, parsed = function
    return {n.name.value: (n, parsed) for n in walk(func) if isinstance(n, cst.FunctionDef) and n is not func}


def _dotted(node: cst.CSTNode) -> str:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
    return ".".join(reversed(parts))


def _statements(block: Optional[cst.CSTNode]) -> list[cst.CSTNode]:
    """A block's statements as the stdlib lists them: each small statement of a line on its own."""
    if block is None:
        return []
    if isinstance(block, (cst.Else, cst.Finally, cst.ExceptHandler)):
        block = block.body
    if isinstance(block, cst.If):  # an `elif`: the else block holds that one statement
        return [block]
    if isinstance(block, cst.SimpleStatementSuite):
        return list(block.body)
    out: list[cst.CSTNode] = []
    for stmt in getattr(block, "body", ()):
        out.extend(stmt.body if isinstance(stmt, cst.SimpleStatementLine) else [stmt])
    return out


def _generators(comp: cst.CSTNode) -> Iterator[cst.CompFor]:
    loop: Optional[cst.CompFor] = comp.for_in
    while loop is not None:
        yield loop
        loop = loop.inner_for_in


class _Class:
    """The walk over one class's commit path."""

    def __init__(self, methods: Callable[[str], Optional[ParsedMethod]], names: frozenset[str],
                 fields: frozenset[str], signals: Signals) -> None:
        self.methods, self.names, self.fields, self.signals = methods, names, fields, signals
        self.uses: dict[tuple[int, int], SidecarUse] = {}
        self.walked: set[tuple[int, State]] = set()
        self.active: set[int] = set()
        self.allocating: dict[int, bool] = {}
        self.reached: dict[int, cst.FunctionDef] = {}
        self.commit = ""

    def method(self, name: str) -> Optional[Function]:
        parsed = self.methods(name) if name in self.names else None
        return (parsed.func, parsed) if parsed is not None else None

    def callee(self, call: cst.Call, visible: dict[str, Function]) -> Optional[tuple[str, Function, dict]]:
        func = call.func
        if isinstance(func, cst.Name) and func.value in visible:
            node = visible[func.value]
            return func.value, node, {**visible, **_nested(node)}
        if isinstance(func, cst.Attribute) and is_name(func.value, "self"):
            node = self.method(func.attr.value)
            if node is not None:
                return func.attr.value, node, _nested(node)
        return None

    def walk(self, function: Function, visible: dict, state: State, where: str, called_at: int) -> None:
        func = function[0]
        key = (id(func), state)
        if key in self.walked or id(func) in self.active:
            return
        self.walked.add(key)
        self.reached[id(func)] = func
        self.active.add(id(func))
        _Walker(self, function[1], visible, where, called_at).block(_statements(func.body), state)
        self.active.discard(id(func))

    def allocates(self, function: Function, visible: dict) -> bool:
        """The function (or one it calls) stores an operation's hit allocation."""
        func = function[0]
        if id(func) in self.allocating:
            return self.allocating[id(func)]
        self.allocating[id(func)] = False
        walker = _Walker(self, function[1], visible, "")
        found = walker.block_allocates(_statements(func.body))
        self.allocating[id(func)] = found
        return found


class _Walker:
    """One function's walk: its locals that hold sidecar values or tests."""

    def __init__(self, owner: _Class, parsed: ParsedMethod, visible: dict, where: str, called_at: int = 0) -> None:
        self.owner, self.parsed, self.visible, self.where, self.called_at = owner, parsed, visible, where, called_at
        self.signals = owner.signals
        # locals holding sidecar values: the field they come from, the state they were taken in
        self.carriers: dict[str, tuple[str, State]] = {}
        self.aliases: dict[str, cst.CSTNode] = {}  # locals holding a test

    # -- sidecar values ---------------------------------------------------------------------------
    def view(self, node: Optional[cst.CSTNode]) -> Optional[tuple[str, State]]:
        """(what, state it was taken in) when `node` evaluates to sidecar results."""
        if node is None:
            return None
        if isinstance(node, cst.Attribute):
            if node.attr.value in self.owner.fields:
                return node.attr.value, State()
            inner = self.view(node.value)
            return inner if inner is not None and node.attr.value in self.signals.allocation else None
        key = attribute_read(node)  # a getattr key (an attribute was read above)
        if key is not None:
            return (key, State()) if key in self.owner.fields else None
        if isinstance(node, cst.Name):
            return self.carriers.get(node.value)
        if isinstance(node, (cst.Subscript, cst.StarredElement)):
            return self.view(node.value)
        if isinstance(node, cst.Call):
            func, args = node.func, positional(node)
            if isinstance(func, cst.Name) and func.value in _PASS_THROUGH and args:
                return self.view(args[0])
            return self.view(func.value) if isinstance(func, cst.Attribute) else None
        if isinstance(node, cst.BooleanOperation):
            return next((v for v in map(self.view, operands(node) or []) if v is not None), None)
        if isinstance(node, cst.IfExp):
            for side, holds in ((node.body, True), (node.orelse, False)):
                found = self.view(side)
                if found is not None:
                    return found[0], found[1].learn(self.facts(node.test, holds))
            return None
        if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            return next((v for v in (self.view(e.value) for e in node.elements) if v is not None), None)
        if isinstance(node, _COMPREHENSIONS):
            saved = dict(self.carriers)
            for gen in _generators(node):
                self.bind(gen.target, gen.iter, State())
            found = self.view(node.value if isinstance(node, cst.DictComp) else node.elt)
            self.carriers = saved
            return found
        return None

    def is_sidecar(self, node: cst.CSTNode) -> bool:
        return self.view(node) is not None

    def facts(self, test: cst.CSTNode, holds: bool) -> dict[str, bool]:
        return self.signals.facts(test, holds, self.aliases, self.is_sidecar)

    def bind(self, target: cst.CSTNode, source: cst.CSTNode, state: State) -> None:
        """Loop or comprehension variables over `source`."""
        if (isinstance(target, cst.Tuple) and isinstance(source, cst.Call) and isinstance(source.func, cst.Name)
                and source.func.value in ("zip", "enumerate")):
            elements, args = [e.value for e in target.elements], positional(source)
            pairs = zip(elements, args) if source.func.value == "zip" else zip(elements[1:], args[:1])
            for element, origin in pairs:
                self.bind(element, origin, state)
            return
        found = self.view(source)
        # destructuring a stored record (a local, attribute or item: not a call's fresh result)
        unpacked = isinstance(target, (cst.Tuple, cst.List)) and isinstance(source, (cst.Name, cst.Attribute,
                                                                                      cst.Subscript))
        for name in (n.value for n in walk(target) if isinstance(n, cst.Name)):
            if found is not None:
                self.carriers[name] = (found[0], found[1].joined(state))
            elif unpacked and name in self.owner.fields:
                # `*_, comp_xfers = info`: a record's element named for a sidecar field is that field
                self.carriers[name] = (name, State().joined(state))
            else:
                self.carriers.pop(name, None)

    # -- handing on -------------------------------------------------------------------------------
    def hand_on(self, node: cst.CSTNode, state: State) -> None:
        """`node` is passed, stored or returned: a sidecar value there must be safe."""
        if self.branches(node, state, self.hand_on):
            return
        if isinstance(node, cst.StarredElement):
            self.hand_on(node.value, state)
            return
        found = self.view(node)
        if found is not None:
            effective = state.joined(found[1])
            if not effective.safe:
                self.report(node, found[0], effective.why_unsafe(self.signals.flag))
        self.expr(node, state)

    def branches(self, node: cst.CSTNode, state: State, visit) -> bool:
        """Visit the parts of `a if t else b` or a boolean chain, each with what it runs under."""
        if isinstance(node, cst.IfExp):
            self.expr(node.test, state)
            visit(node.body, state.learn(self.facts(node.test, True)))
            visit(node.orelse, state.learn(self.facts(node.test, False)))
            return True
        if isinstance(node, cst.BooleanOperation):
            conjunction = isinstance(node.operator, cst.And)
            for value in operands(node) or []:
                visit(value, state)
                state = state.learn(self.facts(value, conjunction))
            return True
        return False

    def report(self, node: cst.CSTNode, what: str, why: str, sets_flag: bool = False) -> None:
        key = self.parsed.loc(node)
        if key not in self.owner.uses:
            self.owner.uses[key] = SidecarUse(self.owner.commit, key[0], key[1], what, self.where,
                                              self.called_at, why, sets_flag)

    def set_flag(self, node: cst.CSTNode, state: State) -> None:
        """The flag may turn true only where every pool transfer has ended."""
        if not (state.pools_ended or state.unallocated):
            self.report(node, self.signals.flag, _EARLY_SET, sets_flag=True)

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, node: Optional[cst.CSTNode], state: State) -> None:
        if node is None or isinstance(node, cst.Lambda) or self.branches(node, state, self.expr):
            return
        if isinstance(node, _COMPREHENSIONS):
            saved = dict(self.carriers)
            for gen in _generators(node):
                self.expr(gen.iter, state)
                self.bind(gen.target, gen.iter, State())
                for condition in gen.ifs:
                    self.expr(condition.test, state)
            for part in ((node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,)):
                self.expr(part, state)
            self.carriers = saved
            return
        if isinstance(node, cst.Call):
            self.call(node, state)
            return
        for child in children(node):
            self.expr(child, state)

    def call(self, node: cst.Call, state: State) -> None:
        func, args = node.func, positional(node)
        name = _dotted(func)
        if (name == "setattr" and len(args) == 3 and string_value(args[1]) == self.signals.flag
                and is_constant(args[2], True)):
            self.set_flag(node, state)
        if name in _INSPECT or name.split(".")[0] in _LOGGERS:
            return  # looks at its arguments, hands nothing on
        arguments = [*args, *(a.value for a in node.args if a.keyword is not None or a.star == "**")]
        if isinstance(func, cst.Name) and func.value in _PASS_THROUGH | {"zip", "enumerate"}:
            for argument in arguments:
                self.expr(argument, state)
            return
        if (isinstance(func, cst.Attribute) and func.attr.value in _COLLECTS and isinstance(func.value, cst.Name)
                and not self.is_sidecar(func.value)):
            found = next((v for v in map(self.view, arguments) if v is not None), None)
            if found is not None:  # the local collection now holds sidecar values
                self.carriers[func.value.value] = (found[0], found[1].joined(state))
                return
        self.expr(func, state)
        for argument in arguments:
            self.hand_on(argument, state)
        target = self.owner.callee(node, self.visible)
        if target is not None:
            callee_name, callee, visible = target
            if self.owner.allocates(callee, visible):
                state = State(state.done, state.io_ended)  # it allocates: its own blocks tell what runs before
            self.owner.walk(callee, visible, state, callee_name, self.parsed.line(node))

    # -- statements -------------------------------------------------------------------------------
    def stmt_allocates(self, stmt: cst.CSTNode) -> bool:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            return False
        scratch = _Walker(self.owner, self.parsed, self.visible, self.where)  # knows the loop variables over sidecars
        scratch.carriers = dict(self.carriers)
        for node in walk(stmt):  # in order: a loop is bound before the statements in it
            if isinstance(node, (cst.For, cst.CompFor)):
                scratch.bind(node.target, node.iter, State())
            if isinstance(node, (cst.Assign, cst.AnnAssign)) and self.signals.allocates(node, scratch.is_sidecar):
                return True
            if isinstance(node, cst.Call):
                target = self.owner.callee(node, self.visible)
                if target is not None and self.owner.allocates(target[1], target[2]):
                    return True
        return False

    def block_allocates(self, body: list[cst.CSTNode]) -> bool:
        return any(self.stmt_allocates(stmt) for stmt in body)

    def block(self, body: Iterable[cst.CSTNode], state: State, before_allocation: bool = False) -> None:
        """`before_allocation`: the enclosing statement goes on to allocate the hit
        (a block that allocates it has not yet at its start): statements up to the
        allocation run while no read can have started."""
        body = list(body)
        first = next((i for i, stmt in enumerate(body) if self.stmt_allocates(stmt)), len(body))
        before_allocation = before_allocation or first < len(body)
        for i, stmt in enumerate(body):
            if before_allocation and i < first:
                self.stmt(stmt, state.learn({"unallocated": True}))
            else:
                self.stmt(stmt, state, before_allocation and i == first)
            if isinstance(stmt, cst.If):
                # `if not done: return` -- what follows runs only when the test was false
                inside, orelse = _statements(stmt.body), _statements(stmt.orelse)
                if _exits(inside) and not orelse:
                    state = state.learn(self.facts(stmt.test, False))
                elif _exits(orelse) and not _exits(inside):
                    state = state.learn(self.facts(stmt.test, True))

    def stmt(self, stmt: cst.CSTNode, state: State, allocates: bool = False) -> None:
        """`allocates`: this statement allocates the hit somewhere inside it."""
        early = state.learn({"unallocated": True}) if allocates else state
        if isinstance(stmt, (cst.If, cst.While)):
            # a test that allocates runs before both branches; else a branch that allocates is
            # the only way on to the allocation
            inner = allocates and not self.stmt_allocates(stmt.test)
            self.expr(stmt.test, early if inner else state)
            self.block(_statements(stmt.body), state.learn(self.facts(stmt.test, True)), inner)
            self.block(_statements(stmt.orelse), state.learn(self.facts(stmt.test, False)) if isinstance(stmt, cst.If)
                       else state, inner)
        elif isinstance(stmt, cst.For):
            self.expr(stmt.iter, state)
            self.bind(stmt.target, stmt.iter, state)
            self.block(_statements(stmt.body), state, allocates)
            self.block(_statements(stmt.orelse), state, allocates)
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                self.expr(item.item, state)
            self.block(_statements(stmt.body), state, allocates)
        elif isinstance(stmt, cst.Try):
            for part in (stmt.body, *stmt.handlers, stmt.orelse, stmt.finalbody):
                self.block(_statements(part), state, allocates)
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            return  # walked where it is called
        elif isinstance(stmt, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            self.assign(stmt, state)
        elif isinstance(stmt, cst.Return) and stmt.value is not None:
            self.hand_on(stmt.value, state)
        else:
            self.expr(stmt, state)

    def assign(self, stmt: cst.CSTNode, state: State) -> None:
        value = stmt.value
        if value is None:
            return
        targets = [t.target for t in stmt.targets] if isinstance(stmt, cst.Assign) else [stmt.target]
        found = self.view(value)
        stored = False
        for target in targets:
            if isinstance(target, cst.Attribute) and target.attr.value == self.signals.flag and is_constant(value, True):
                self.set_flag(stmt, state)
            if isinstance(target, cst.Name):
                self.aliases.pop(target.value, None)
                if found is not None:
                    self.carriers[target.value] = (found[0], found[1].joined(state))
                elif not (isinstance(stmt, cst.AugAssign) and target.value in self.carriers):  # `x += y` keeps x
                    self.carriers.pop(target.value, None)
                    if self.facts(value, True) or self.facts(value, False):
                        self.aliases[target.value] = value
            elif isinstance(target, (cst.Tuple, cst.List)):
                self.bind(target, value, state)
            else:
                stored = True  # into a subscript or attribute: handed on
        if stored:
            self.hand_on(value, state)
        else:
            self.expr(value, state)


_EARLY_SET = ("to True where no test shows that every pool transfer has ended (a pools-ended signal, such as "
              "`ack.pool_hits is not None`): the commit then takes sidecar hits whose reads may still run")


def _exits(body: list[cst.CSTNode]) -> bool:
    return bool(body) and isinstance(body[-1], (cst.Return, cst.Continue, cst.Raise, cst.Break))


def analyze_commit(methods: Callable[[str], Optional[ParsedMethod]], sites: dict[str, MethodSite],
                   commit: Iterable[str], fields: Iterable[str], signals: Signals) -> CommitPath:
    """`methods`: the class's method of a name, parsed; `sites`: where each method of the class is."""
    names = list(commit)
    found = [n for n in names if n in sites]
    walk_ = _Class(methods, frozenset(sites), frozenset(fields), signals)
    for name in found:
        walk_.commit = name
        function = walk_.method(name)
        if function is not None:
            walk_.walk(function, _nested(function), State(), "", 0)
    path = CommitPath(found, [n for n in names if n not in sites],
                      any(reads_done(f, signals.flag) for f in walk_.reached.values()))
    path.unguarded = sorted(walk_.uses.values(), key=lambda u: (u.line, u.col))
    path.sites = {name: replace(sites[name], index=ClassIndex()) for name in found}  # the class's stdlib tree not kept
    return path

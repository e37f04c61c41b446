"""The commit path of an implementation whose pool-transfer check lives there.

SGLang's 0.5.2x UnifiedRadixCache decides to stop on the timeout alone and
commits through an ACK drain: `pool_transfers_done` then decides which sidecar
hits are inserted into the tree or released to their pools. Inputs: the
class's methods (stdlib ast, from the file's ClassIndex), the configured commit
methods, sidecar field names and state signals (commit_state.Signals). Output:
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

import ast
from dataclasses import dataclass, field
from typing import Iterable, Optional

from lint.analysis.commit_state import Signals, State, getattr_key, reads_done
from lint.locate import ClassIndex, FunctionNode

_INSPECT = frozenset({"len", "bool", "isinstance", "print", "repr", "str", "id", "hash", "type", "getattr",
                      "hasattr", "any", "all", "sum", "min", "max"})
_PASS_THROUGH = frozenset({"list", "tuple", "set", "frozenset", "dict", "sorted", "reversed", "iter"})
_COLLECTS = frozenset({"append", "extend", "add", "update", "insert", "appendleft", "setdefault"})
_LOGGERS = ("logger", "logging", "log")


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
    def_lines: dict[str, int] = field(default_factory=dict)
    # (first line with decorators, def line, end line, column) of each commit method: its suppression comments
    spans: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)


def _nested(func: FunctionNode) -> dict[str, FunctionNode]:
    return {n.name: n for n in ast.walk(func)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not func}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


class _Class:
    """The walk over one class's commit path."""

    def __init__(self, index: ClassIndex, fields: frozenset[str], signals: Signals) -> None:
        self.index, self.fields, self.signals = index, fields, signals
        self.uses: dict[tuple[int, int], SidecarUse] = {}
        self.walked: set[tuple[int, State]] = set()
        self.active: set[int] = set()
        self.allocating: dict[int, bool] = {}
        self.reached: dict[int, FunctionNode] = {}
        self.commit = ""

    def callee(self, call: ast.Call, visible: dict[str, FunctionNode]) -> Optional[tuple[str, FunctionNode, dict]]:
        func = call.func
        if isinstance(func, ast.Name) and func.id in visible:
            node = visible[func.id]
            return func.id, node, {**visible, **_nested(node)}
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
                and func.attr in self.index.methods):
            node = self.index.methods[func.attr]
            return func.attr, node, _nested(node)
        return None

    def walk(self, func: FunctionNode, visible: dict, state: State, where: str, called_at: int) -> None:
        key = (id(func), state)
        if key in self.walked or id(func) in self.active:
            return
        self.walked.add(key)
        self.reached[id(func)] = func
        self.active.add(id(func))
        _Walker(self, visible, where, called_at).block(func.body, state)
        self.active.discard(id(func))

    def allocates(self, func: FunctionNode, visible: dict) -> bool:
        """The function (or one it calls) stores an operation's hit allocation."""
        if id(func) in self.allocating:
            return self.allocating[id(func)]
        self.allocating[id(func)] = False
        walker = _Walker(self, visible, "")
        found = walker.block_allocates(func.body)
        self.allocating[id(func)] = found
        return found


class _Walker:
    """One function's walk: its locals that hold sidecar values or tests."""

    def __init__(self, owner: _Class, visible: dict, where: str, called_at: int = 0) -> None:
        self.owner, self.visible, self.where, self.called_at = owner, visible, where, called_at
        self.signals = owner.signals
        # locals holding sidecar values: the field they come from, the state they were taken in
        self.carriers: dict[str, tuple[str, State]] = {}
        self.aliases: dict[str, ast.expr] = {}  # locals holding a test

    # -- sidecar values ---------------------------------------------------------------------------
    def view(self, node: Optional[ast.AST]) -> Optional[tuple[str, State]]:
        """(what, state it was taken in) when `node` evaluates to sidecar results."""
        if node is None:
            return None
        if isinstance(node, ast.Attribute):
            if node.attr in self.owner.fields:
                return node.attr, State()
            inner = self.view(node.value)
            return inner if inner is not None and node.attr in self.signals.allocation else None
        key = getattr_key(node)
        if key is not None:
            return (key, State()) if key in self.owner.fields else None
        if isinstance(node, ast.Name):
            return self.carriers.get(node.id)
        if isinstance(node, (ast.Subscript, ast.Starred)):
            return self.view(node.value)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in _PASS_THROUGH and node.args:
                return self.view(node.args[0])
            return self.view(func.value) if isinstance(func, ast.Attribute) else None
        if isinstance(node, ast.BoolOp):
            return next((v for v in map(self.view, node.values) if v is not None), None)
        if isinstance(node, ast.IfExp):
            for side, holds in ((node.body, True), (node.orelse, False)):
                found = self.view(side)
                if found is not None:
                    return found[0], found[1].learn(self.facts(node.test, holds))
            return None
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return next((v for v in map(self.view, node.elts) if v is not None), None)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            saved = dict(self.carriers)
            for gen in node.generators:
                self.bind(gen.target, gen.iter, State())
            elt = node.value if isinstance(node, ast.DictComp) else node.elt
            found = self.view(elt)
            self.carriers = saved
            return found
        return None

    def is_sidecar(self, node: ast.AST) -> bool:
        return self.view(node) is not None

    def facts(self, test: ast.AST, holds: bool) -> dict[str, bool]:
        return self.signals.facts(test, holds, self.aliases, self.is_sidecar)

    def bind(self, target: ast.AST, source: ast.AST, state: State) -> None:
        """Loop or comprehension variables over `source`."""
        if (isinstance(target, ast.Tuple) and isinstance(source, ast.Call) and isinstance(source.func, ast.Name)
                and source.func.id in ("zip", "enumerate")):
            pairs = (zip(target.elts, source.args) if source.func.id == "zip"
                     else zip(target.elts[1:], source.args[:1]))
            for element, origin in pairs:
                self.bind(element, origin, state)
            return
        found = self.view(source)
        # destructuring a stored record (a local, attribute or item: not a call's fresh result)
        unpacked = isinstance(target, (ast.Tuple, ast.List)) and isinstance(source, (ast.Name, ast.Attribute,
                                                                                      ast.Subscript))
        for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
            if found is not None:
                self.carriers[name] = (found[0], found[1].joined(state))
            elif unpacked and name in self.owner.fields:
                # `*_, comp_xfers = info`: a record's element named for a sidecar field is that field
                self.carriers[name] = (name, State().joined(state))
            else:
                self.carriers.pop(name, None)

    # -- handing on -------------------------------------------------------------------------------
    def hand_on(self, node: ast.AST, state: State) -> None:
        """`node` is passed, stored or returned: a sidecar value there must be safe."""
        if self.branches(node, state, self.hand_on):
            return
        if isinstance(node, ast.Starred):
            self.hand_on(node.value, state)
            return
        found = self.view(node)
        if found is not None:
            effective = state.joined(found[1])
            if not effective.safe:
                self.report(node, found[0], effective.why_unsafe(self.signals.flag))
        self.expr(node, state)

    def branches(self, node: ast.AST, state: State, visit) -> bool:
        """Visit the parts of `a if t else b` or a boolean chain, each with what it runs under."""
        if isinstance(node, ast.IfExp):
            self.expr(node.test, state)
            visit(node.body, state.learn(self.facts(node.test, True)))
            visit(node.orelse, state.learn(self.facts(node.test, False)))
            return True
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                visit(value, state)
                state = state.learn(self.facts(value, isinstance(node.op, ast.And)))
            return True
        return False

    def report(self, node: ast.AST, what: str, why: str, sets_flag: bool = False) -> None:
        key = (node.lineno, node.col_offset + 1)
        if key not in self.owner.uses:
            self.owner.uses[key] = SidecarUse(self.owner.commit, key[0], key[1], what, self.where,
                                              self.called_at, why, sets_flag)

    def set_flag(self, node: ast.AST, state: State) -> None:
        """The flag may turn true only where every pool transfer has ended."""
        if not (state.pools_ended or state.unallocated):
            self.report(node, self.signals.flag, _EARLY_SET, sets_flag=True)

    # -- expressions ------------------------------------------------------------------------------
    def expr(self, node: Optional[ast.AST], state: State) -> None:
        if node is None or isinstance(node, ast.Lambda) or self.branches(node, state, self.expr):
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            saved = dict(self.carriers)
            for gen in node.generators:
                self.expr(gen.iter, state)
                self.bind(gen.target, gen.iter, State())
                for condition in gen.ifs:
                    self.expr(condition, state)
            for part in ((node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)):
                self.expr(part, state)
            self.carriers = saved
            return
        if isinstance(node, ast.Call):
            self.call(node, state)
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child, state)

    def call(self, node: ast.Call, state: State) -> None:
        func = node.func
        name = _dotted(func)
        if (name == "setattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == self.signals.flag and _true(node.args[2])):
            self.set_flag(node, state)
        if name in _INSPECT or name.split(".")[0] in _LOGGERS:
            return  # looks at its arguments, hands nothing on
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(func, ast.Name) and func.id in _PASS_THROUGH | {"zip", "enumerate"}:
            for argument in arguments:
                self.expr(argument, state)
            return
        if (isinstance(func, ast.Attribute) and func.attr in _COLLECTS and isinstance(func.value, ast.Name)
                and not self.is_sidecar(func.value)):
            found = next((v for v in map(self.view, arguments) if v is not None), None)
            if found is not None:  # the local collection now holds sidecar values
                self.carriers[func.value.id] = (found[0], found[1].joined(state))
                return
        self.expr(func, state)
        for argument in arguments:
            self.hand_on(argument, state)
        target = self.owner.callee(node, self.visible)
        if target is not None:
            callee_name, callee, visible = target
            if self.owner.allocates(callee, visible):
                state = State(state.done, state.io_ended)  # it allocates: its own blocks tell what runs before
            self.owner.walk(callee, visible, state, callee_name, node.lineno)

    # -- statements -------------------------------------------------------------------------------
    def stmt_allocates(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        scratch = _Walker(self.owner, self.visible, self.where)  # knows the loop variables over sidecars
        scratch.carriers = dict(self.carriers)
        for node in ast.walk(stmt):  # breadth first: a loop is bound before the statements in it
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                scratch.bind(node.target, node.iter, State())
            if isinstance(node, ast.stmt) and self.signals.allocates(node, scratch.is_sidecar):
                return True
            if isinstance(node, ast.Call):
                target = self.owner.callee(node, self.visible)
                if target is not None and self.owner.allocates(target[1], target[2]):
                    return True
        return False

    def block_allocates(self, body: list[ast.stmt]) -> bool:
        return any(self.stmt_allocates(stmt) for stmt in body)

    def block(self, body: Iterable[ast.stmt], state: State, before_allocation: bool = False) -> None:
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
            if isinstance(stmt, ast.If):
                # `if not done: return` -- what follows runs only when the test was false
                if _exits(stmt.body) and not stmt.orelse:
                    state = state.learn(self.facts(stmt.test, False))
                elif _exits(stmt.orelse) and not _exits(stmt.body):
                    state = state.learn(self.facts(stmt.test, True))

    def stmt(self, stmt: ast.stmt, state: State, allocates: bool = False) -> None:
        """`allocates`: this statement allocates the hit somewhere inside it."""
        early = state.learn({"unallocated": True}) if allocates else state
        if isinstance(stmt, (ast.If, ast.While)):
            # a test that allocates runs before both branches; else a branch that allocates is
            # the only way on to the allocation
            inner = allocates and not self.stmt_allocates(ast.Expr(stmt.test))
            self.expr(stmt.test, early if inner else state)
            self.block(stmt.body, state.learn(self.facts(stmt.test, True)), inner)
            self.block(stmt.orelse, state.learn(self.facts(stmt.test, False)) if isinstance(stmt, ast.If)
                       else state, inner)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expr(stmt.iter, state)
            self.bind(stmt.target, stmt.iter, state)
            self.block(stmt.body, state, allocates)
            self.block(stmt.orelse, state, allocates)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.expr(item.context_expr, state)
            self.block(stmt.body, state, allocates)
        elif isinstance(stmt, ast.Try):
            for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                self.block(part, state, allocates)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return  # walked where it is called
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self.assign(stmt, state)
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            self.hand_on(stmt.value, state)
        else:
            self.expr(stmt, state)

    def assign(self, stmt: ast.stmt, state: State) -> None:
        value = stmt.value
        if value is None:
            return
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        found = self.view(value)
        stored = False
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr == self.signals.flag and _true(value):
                self.set_flag(stmt, state)
            if isinstance(target, ast.Name):
                self.aliases.pop(target.id, None)
                if found is not None:
                    self.carriers[target.id] = (found[0], found[1].joined(state))
                elif not (isinstance(stmt, ast.AugAssign) and target.id in self.carriers):  # `x += y` keeps x
                    self.carriers.pop(target.id, None)
                    if self.facts(value, True) or self.facts(value, False):
                        self.aliases[target.id] = value
            elif isinstance(target, (ast.Tuple, ast.List)):
                self.bind(target, value, state)
            else:
                stored = True  # into a subscript or attribute: handed on
        if stored:
            self.hand_on(value, state)
        else:
            self.expr(value, state)


_EARLY_SET = ("to True where no test shows that every pool transfer has ended (a pools-ended signal, such as "
              "`ack.pool_hits is not None`): the commit then takes sidecar hits whose reads may still run")


def _true(value: Optional[ast.AST]) -> bool:
    return isinstance(value, ast.Constant) and value.value is True


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue, ast.Raise, ast.Break))


def analyze_commit(index: ClassIndex, commit: Iterable[str], fields: Iterable[str],
                   signals: Signals) -> CommitPath:
    names = list(commit)
    found = [n for n in names if n in index.methods]
    walk = _Class(index, frozenset(fields), signals)
    for name in found:
        walk.commit = name
        func = index.methods[name]
        walk.walk(func, _nested(func), State(), "", 0)
    path = CommitPath(found, [n for n in names if n not in index.methods],
                      any(reads_done(f, signals.flag) for f in walk.reached.values()))
    path.unguarded = sorted(walk.uses.values(), key=lambda u: (u.line, u.col))
    for name in found:
        func = index.methods[name]
        path.def_lines[name] = func.lineno
        first = min([func.lineno] + [d.lineno for d in func.decorator_list])
        path.spans[name] = (first, func.lineno, func.end_lineno or func.lineno, func.col_offset)
    return path

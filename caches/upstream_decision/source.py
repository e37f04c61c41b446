"""Read an upstream class's decision code from an SGLang checkout, with `ast`, never importing it.

`extract(root, key)` finds the class, its `can_terminate_prefetch`, and every
method of the same class that the decision reaches through `self` (directly,
or through an attribute its `__init__` sets to a method, like
`self.is_prefetch_timeout = self._prefetch_timeout_check_linear_func`). A
number `__init__` sets once and never from configuration (an older tree's
`self.prefetch_timeout = 3`) is the class's constant, read here. Every other
name those methods read is checked against the shim's table (names.py)
before anything runs: a name the shim does not map is one error naming it
and the class. `ExtractedDecision.compile(namespace)` turns the methods into
functions whose module globals are the shim's (line numbers stay the
checkout's, so a traceback points into the user's file).
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from caches.upstream_decision.names import (
    ENTRY_METHOD,
    GLOBAL_NAMES,
    GLOBAL_ROOTS,
    MEM_CACHE_DIR,
    OPERATION_NAMES,
    SELF_NAMES,
    UPSTREAM_CLASSES,
    self_namespaces,
)
from caches.upstream_decision.group_rule import class_group_rule
from spec.errors import CacheError, ConfigError
from spec.groups import ATTENTION_RULE

_BUILTINS = frozenset(dir(builtins))
_ATTRIBUTE_LOOKUPS = frozenset({"getattr", "hasattr"})


class ClassUnavailable(CacheError):
    """The checkout has no such file, class or method: the implementation is reported, not run."""


class UnmappedName(ConfigError):
    """Upstream's decision reads a name the shim does not map (one line, naming it and the class)."""

    def __init__(self, class_name: str, path: Path, found: list[str]) -> None:
        self.field, self.value = f"{class_name}.{ENTRY_METHOD}", found
        self.accepted = "names the shim maps (caches/upstream_decision/names.py)"
        ValueError.__init__(
            self,
            f"{class_name}.{ENTRY_METHOD} in {path} reads {', '.join(found)}: not mapped by the upstream-decision shim "
            "(its table: caches/upstream_decision/names.py, conformance/ADAPTERS.md)",
        )


@dataclass(frozen=True)
class ExtractedDecision:
    """One upstream class's decision: its methods (stripped of annotations and decorators) and how they connect."""

    key: str
    path: Path
    class_name: str
    methods: dict[str, ast.FunctionDef]
    aliases: dict[str, str]  # self attribute set in __init__ -> the method it names
    timeout_helpers: frozenset[str]  # methods that read time.monotonic (the timeout check)
    group_rule: tuple[str, str] = (ATTENTION_RULE, "")  # (X2 rule of the class, evidence): group_rule.py
    constants: tuple[tuple[str, float], ...] = ()  # self attribute -> the number __init__ sets it to, for names the shim leaves unmapped

    def compile(self, namespace: dict[str, Any]) -> dict[str, Callable[..., Any]]:
        """The methods as plain functions (self first), with `namespace` as their module globals.

        With RETURNED in the namespace, each value the entry method returns passes
        through it first, called at upstream's return line while its frame still runs.
        """
        nodes = [copy.deepcopy(node) for node in self.methods.values()]
        if RETURNED in namespace:
            for node in nodes:
                if node.name == ENTRY_METHOD:
                    node.body = [_ReturnHook().visit(stmt) for stmt in node.body]
        module = ast.fix_missing_locations(ast.Module(body=nodes, type_ignores=[]))
        exec(compile(module, str(self.path), "exec"), namespace)
        return {name: namespace[name] for name in self.methods}


RETURNED = "__conformance_returned__"  # the shim's hook on what the entry method returns (shim.BoundDecision)


class _ReturnHook(ast.NodeTransformer):
    """`return x` -> `return RETURNED(x)` in one function, at the line of the return; nested scopes untouched."""

    def visit_Return(self, node: ast.Return) -> ast.Return:
        value = node.value or ast.copy_location(ast.Constant(None), node)
        node.value = ast.copy_location(ast.Call(ast.Name(RETURNED, ast.Load()), [value], []), value)
        return node

    def visit_FunctionDef(self, node: ast.AST) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


def checkout_dir(root: Path) -> Path:
    """The mem_cache folder of an SGLang checkout; one error line when `root` is not one."""
    folder = Path(root) / MEM_CACHE_DIR
    if not folder.is_dir():
        raise ConfigError("--sglang", str(root), f"the root of an SGLang checkout (a folder containing {MEM_CACHE_DIR}/)")
    return folder


def extract(root: Path, key: str) -> ExtractedDecision:
    if key not in UPSTREAM_CLASSES:
        raise ConfigError("upstream class", key, "one of " + ", ".join(UPSTREAM_CLASSES))
    file_name, class_name = UPSTREAM_CLASSES[key]
    path = checkout_dir(root) / file_name
    if not path.is_file():
        raise ClassUnavailable(f"{MEM_CACHE_DIR}/{file_name} is not in this checkout")
    stat = path.stat()
    return _extract_cached(key, str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _extract_cached(key: str, path_text: str, _mtime_ns: int, _size: int) -> ExtractedDecision:
    path = Path(path_text)
    file_name, class_name = UPSTREAM_CLASSES[key]
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=path_text)
    except SyntaxError as exc:
        raise ClassUnavailable(f"{MEM_CACHE_DIR}/{file_name} does not parse (line {exc.lineno}: {exc.msg})") from None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise ClassUnavailable(f"class {class_name} is not defined in {MEM_CACHE_DIR}/{file_name}")
    # Annotations and decorators name upstream types this process never imports: dropped before anything.
    defined = {n.name: _stripped(n) for n in cls.body if isinstance(n, ast.FunctionDef)}
    if ENTRY_METHOD not in defined:
        raise ClassUnavailable(f"{class_name} in {MEM_CACHE_DIR}/{file_name} defines no {ENTRY_METHOD} of its own")
    aliases = _init_aliases(defined.get("__init__"), defined)
    constants = {name: value for name, value in _init_constants(defined.get("__init__")).items() if name not in SELF_NAMES}
    walk = _Walk(class_name, path, defined, aliases, frozenset(constants))
    entry_params = _params(defined[ENTRY_METHOD])
    walk.visit(ENTRY_METHOD, operation_params=set(entry_params[1:2]))
    if walk.unmapped:
        raise UnmappedName(class_name, path, walk.unmapped)
    methods = {name: defined[name] for name in walk.order}
    rule = class_group_rule(cls, path, f"{MEM_CACHE_DIR}/{file_name}")
    read = tuple(sorted((name, value) for name, value in constants.items() if name in walk.constants_read))
    return ExtractedDecision(key, path, class_name, methods, aliases, frozenset(walk.timeout_helpers), rule, read)


# --- the walk: which methods the decision reaches, and every name they read ---------


class _Walk:
    def __init__(self, class_name: str, path: Path, defined: dict[str, ast.FunctionDef], aliases: dict[str, str],
                 constants: frozenset[str] = frozenset()) -> None:
        self.constants = constants
        self.constants_read: set[str] = set()
        self.class_name = class_name
        self.path = path
        self.defined = defined
        self.aliases = aliases
        self.order: list[str] = []
        self.operation_params: dict[str, set[str]] = {}
        self.unmapped: list[str] = []
        self.timeout_helpers: set[str] = set()

    def visit(self, name: str, operation_params: set[str]) -> None:
        known = self.operation_params.setdefault(name, set())
        if name in self.order and operation_params <= known:
            return
        known |= operation_params
        if name not in self.order:
            self.order.append(name)
        self._check(self.defined[name], known)

    def _method(self, attribute: str) -> str | None:
        name = self.aliases.get(attribute, attribute)
        return name if name in self.defined else None

    def _miss(self, what: str, node: ast.AST) -> None:
        entry = f"{what} (line {getattr(node, 'lineno', '?')})"
        if entry not in self.unmapped:
            self.unmapped.append(entry)

    def _check(self, fn: ast.FunctionDef, operation_params: set[str]) -> None:
        params = _params(fn)
        me = params[0] if params else None
        local = set(params) | {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        namespaces = _namespace_locals(fn, me)
        parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                self._check_call(node, me, operation_params)
            if not isinstance(node, (ast.Attribute, ast.Name)) or isinstance(parents.get(node), ast.Attribute):
                continue  # only whole chains: self.a.b is checked once, as self.a.b
            chain = _chain(node)
            if chain is None:
                continue
            root, *attrs = chain
            if root == me:
                self._check_self(attrs, node)
            elif root in operation_params:
                if attrs and attrs[0] not in OPERATION_NAMES:
                    self._miss(f"{root}.{attrs[0]} (the operation)", node)
            elif root in namespaces:
                self._check_self([namespaces[root], *attrs], node)
            elif root not in local and root not in _BUILTINS:
                dotted = ".".join(chain)
                if root not in GLOBAL_ROOTS or dotted not in GLOBAL_NAMES:
                    self._miss(f"module-level name {dotted}", node)
                elif dotted == "time.monotonic":
                    self.timeout_helpers.add(fn.name)

    def _check_self(self, attrs: list[str], node: ast.AST) -> None:
        if not attrs:
            return  # self passed on as a whole: its reads are checked where they happen
        head = attrs[0]
        if self._method(head) is not None:
            return  # a method: checked when visited through its call
        if head in self_namespaces():
            if len(attrs) > 1 and f"{head}.{attrs[1]}" not in SELF_NAMES:
                self._miss(f"self.{head}.{attrs[1]}", node)
            return
        if head in self.constants and head not in SELF_NAMES:
            self.constants_read.add(head)
            return
        if head not in SELF_NAMES:
            self._miss(f"self.{head}", node)

    def _check_call(self, call: ast.Call, me: str | None, operation_params: set[str]) -> None:
        func = call.func
        if isinstance(func, ast.Name) and func.id in _ATTRIBUTE_LOOKUPS and len(call.args) >= 2:
            target, attribute = call.args[0], call.args[1]
            if isinstance(target, ast.Name) and isinstance(attribute, ast.Constant) and isinstance(attribute.value, str):
                if target.id == me:
                    self._check_self([attribute.value], call)
                elif target.id in operation_params and attribute.value not in OPERATION_NAMES:
                    self._miss(f"{target.id}.{attribute.value} (the operation, via {func.id})", call)
            return
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == me):
            return
        method = self._method(func.attr)
        if method is None:
            return
        callee = _params(self.defined[method])[1:]
        passed = {callee[i] for i, arg in enumerate(call.args) if i < len(callee) and isinstance(arg, ast.Name) and arg.id in operation_params}
        passed |= {kw.arg for kw in call.keywords if kw.arg in callee and isinstance(kw.value, ast.Name) and kw.value.id in operation_params}
        self.visit(method, passed)


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]


def _chain(node: ast.AST) -> list[str] | None:
    """self.a.b -> ['self', 'a', 'b']; None when the chain does not start at a name."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
        return None
    return [node.id, *reversed(attrs)]


def _namespace_locals(fn: ast.FunctionDef, me: str | None) -> dict[str, str]:
    """Locals bound once to a mapped self namespace (`cfg = self.prefetch_timeout_config`)."""
    out = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            chain = _chain(node.value)
            if chain and len(chain) == 2 and chain[0] == me and chain[1] in self_namespaces():
                out[node.targets[0].id] = chain[1]
    return out


def _init_aliases(init: ast.FunctionDef | None, defined: dict[str, ast.FunctionDef]) -> dict[str, str]:
    """self.<attr> = self.<method> in __init__: the attribute calls that method."""
    if init is None:
        return {}
    params = _params(init)
    me = params[0] if params else "self"
    out = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = _chain(node.targets[0]), _chain(node.value)
            if target and value and len(target) == 2 == len(value) and target[0] == me == value[0] and value[1] in defined:
                out[target[1]] = value[1]
    return out


def _init_constants(init: ast.FunctionDef | None) -> dict[str, float]:
    """self.<attr> = <number> assigned exactly once in __init__ (and nowhere else in it): a constant of the class."""
    if init is None:
        return {}
    me = (_params(init) or ["self"])[0]
    numbers: dict[str, float] = {}
    assigned: dict[str, int] = {}
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            chain = _chain(target) if isinstance(target, ast.Attribute) else None
            if chain and len(chain) == 2 and chain[0] == me:
                assigned[chain[1]] = assigned.get(chain[1], 0) + 1
                value = getattr(node, "value", None)
                if isinstance(node, ast.Assign) and isinstance(value, ast.Constant) and type(value.value) in (int, float):
                    numbers[chain[1]] = value.value
    return {name: value for name, value in numbers.items() if assigned[name] == 1}


def _stripped(fn: ast.FunctionDef) -> ast.FunctionDef:
    """A copy without decorators and annotations: they name upstream types this process never imports."""
    node = copy.deepcopy(fn)
    node.decorator_list = []
    node.returns = None
    for arg in _all_args(node.args):
        arg.annotation = None
    for inner in ast.walk(node):
        if isinstance(inner, ast.AnnAssign):
            inner.annotation = ast.Constant(value=None)
    return ast.fix_missing_locations(node)


def _all_args(args: ast.arguments) -> Iterator[ast.arg]:
    yield from args.posonlyargs
    yield from args.args
    yield from args.kwonlyargs
    if args.vararg:
        yield args.vararg
    if args.kwarg:
        yield args.kwarg

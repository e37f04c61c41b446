"""Which groups an upstream class reduces its votes over (X2), read from the class's own code.

A class with a helper that reduces over its attention groups (SGLang's
`_all_reduce_attn_groups`: attn_cp, then attn_tp, else tp_group) follows the
attention rule; a class whose collectives name only `self.tp_group`
(`HiMambaRadixCache`) the tp rule. The decision is judged against the rule of
its class: a vote reduced over another group than the class's is X2's defect.
"""

from __future__ import annotations

import ast
from pathlib import Path

from spec.groups import ATTENTION_RULE, TP_RULE

ATTENTION_GROUPS = ("attn_cp_group", "attn_tp_group")


def _self_reads(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}


def _reduces(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "all_reduce"]


def class_group_rule(cls: ast.ClassDef, path: Path, shown: str) -> tuple[str, str]:
    """(rule, evidence "path:line: what") for the class `cls` of the file shown as `shown`."""
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    for method in methods:
        if _reduces(method) and _self_reads(method) & set(ATTENTION_GROUPS):
            return ATTENTION_RULE, (f"{shown}:{method.lineno}: {cls.name}.{method.name} reduces over the attention "
                                    f"groups (self.attn_cp_group, self.attn_tp_group), else self.tp_group")
    for method in methods:
        for call in _reduces(method):
            if any(k.arg == "group" and "tp_group" in _self_reads(k.value) for k in call.keywords):
                return TP_RULE, f"{shown}:{call.lineno}: {cls.name}.{method.name} reduces over self.tp_group only"
    return TP_RULE, f"{shown}:{cls.lineno}: no method of {cls.name} reduces over an attention group"

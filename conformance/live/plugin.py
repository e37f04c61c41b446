"""The --sglang-live option (registered by conformance/plugin/__init__.py): the trees it names and the adapters it adds."""

from __future__ import annotations

from typing import Any

from conformance.live import runtime as live_runtime
from conformance.live.adapter import LiveAdapter, adapters_for
from conformance.live.tree import OPTION, SglangTree, locate
from spec.errors import ConfigError


def live_trees(values: list[str]) -> list[SglangTree]:
    if len(values) > 1:
        raise ConfigError(OPTION, values, "one SGLang tree per run (each tree is imported into the test process)")
    trees = [locate(v) for v in values]
    for tree in trees:
        if not tree.layouts:
            raise ConfigError(OPTION, tree.given, f"a tree defining one of the live classes ({'; '.join([*tree.missing, *tree.unwired])})")
    return trees


def live_adapters(config: Any) -> list[LiveAdapter]:
    """The adapters of the tree named by --sglang-live (none without it); the tree is imported now, so a broken environment is a usage error."""
    trees = live_trees(config.getoption(OPTION))
    for tree in trees:
        live_runtime.load(tree)
        if not set(tree.layouts) - set(live_runtime.refused(tree)):
            raise ConfigError(OPTION, tree.given, "a tree with a layout that imports: " + "; ".join(live_runtime.refused(tree).values()))
    return [a for tree in trees for a in adapters_for(tree)]


def report_lines(config: Any) -> list[str]:
    """Header lines: what each tree offers, what is missing or recognised but not run."""
    lines = []
    for tree in live_trees(config.getoption(OPTION)):
        lines.append(f"sglang-live: {tree.import_root / 'sglang'} ({tree.label}): running {', '.join(tree.layouts)}")
        lines += [f"sglang-live: not run: {m}" for m in tree.missing]
        lines += [f"sglang-live: not run: {line}" for line in tree.unwired]
        lines += [f"sglang-live: not run: {key}: {why}" for key, why in live_runtime.refused(tree).items()]
        lines += [f"sglang-live: {note}" for note in live_runtime.notes(tree)]
    return lines

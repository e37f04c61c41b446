"""Every rule's own VALID / INVALID examples, run as tests (the Fixit habit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lint.api import fix_source, lint_source
from lint.config import Config, from_table
from lint.rules import ALL_RULES, ERROR, FIXABLE_CODES, RULES_BY_CODE, RULES_BY_NAME, SUPPRESSIBLE_CODES, Valid

VALID = [
    pytest.param(rule, i, id=f"{rule.code}-valid-{i}")
    for rule in ALL_RULES for i in range(len(rule.VALID))
]
INVALID = [
    pytest.param(rule, i, id=f"{rule.code}-invalid-{i}")
    for rule in ALL_RULES for i in range(len(rule.INVALID))
]
FIXED = [
    pytest.param(rule, i, id=f"{rule.code}-fixed-{i}")
    for rule in ALL_RULES for i, example in enumerate(rule.INVALID) if example.fixed is not None
]


def config_of(table) -> Config:
    return Config(root=Path.cwd()) if table is None else from_table(table, "example", Path.cwd(), None)


def test_codes_are_stable_and_documented():
    assert [r.code for r in ALL_RULES] == ["HC101", "HC102", "HC103", "HC104", "HC105", "HC106", "HC107", "HC108",
                                            "HC109"]
    assert len(RULES_BY_NAME) == len(ALL_RULES)
    readme = (__import__("lint").__path__[0] + "/README.md")
    text = open(readme, encoding="utf-8").read()
    for rule in ALL_RULES:
        assert rule.code in text and rule.name in text
        assert rule.summary and rule.__doc__
        assert rule.level in ("error", "warning", "info")


def test_the_registry_is_the_one_list():
    assert FIXABLE_CODES == {"HC101", "HC102", "HC103", "HC107"}
    assert SUPPRESSIBLE_CODES == ("HC101", "HC102", "HC103", "HC104", "HC107", "HC108", "HC109")
    assert [r.code for r in ALL_RULES if r.level != ERROR] == ["HC107", "HC109"]


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_every_rule_has_examples(rule):
    assert rule.VALID and rule.INVALID
    if rule.fixable:
        assert any(example.fixed and example.fixed != example.code for example in rule.INVALID)


@pytest.mark.parametrize("rule, index", VALID)
def test_valid_example(rule, index):
    example = rule.VALID[index]
    code, table = (example.code, example.config) if isinstance(example, Valid) else (example, None)
    result = lint_source(code, config_of(table))
    assert result.errors == []
    assert [str(f) for f in result.findings if f.code == rule.code] == []


@pytest.mark.parametrize("rule, index", INVALID)
def test_invalid_example(rule, index):
    example = rule.INVALID[index]
    result = lint_source(example.code, config_of(example.config))
    assert result.errors == []
    hits = [f for f in result.findings if f.code == rule.code]
    assert hits, f"{rule.code} not reported; got {[str(f) for f in result.findings]}"
    if example.line is not None:
        assert [f.line for f in hits] == [example.line] * len(hits)
    if example.message is not None:
        assert any(example.message in f.message for f in hits), [f.message for f in hits]


@pytest.mark.parametrize("rule, index", FIXED)
def test_fixed_example(rule, index):
    example = rule.INVALID[index]
    config = config_of(example.config)
    fixed = fix_source(example.code, config)
    assert fixed == example.fixed
    before = lint_source(example.code, config)
    fixable = [f for f in before.findings if f.code == rule.code and f.fixable]
    if example.fixed == example.code:  # no fix is offered, and the finding says so
        assert fixable == []
        return
    assert fixable
    assert fix_source(fixed, config) == fixed, "fix is not idempotent"
    after = lint_source(fixed, config)
    assert [str(f) for f in after.findings if f.code in FIXABLE_CODES and RULES_BY_CODE[f.code].level == ERROR] == []


def test_rule_lookup_by_code():
    assert RULES_BY_CODE["HC101"].name == "guard-missing"

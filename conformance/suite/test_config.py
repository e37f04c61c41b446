"""Configuration: bad termination fields are rejected where they are configured (C1, C2).

Through the adapter's optional configure(fields), which builds the
implementation's own configuration from spec-named fields.
"""

from __future__ import annotations

import math

import pytest

from spec.config import Policy

VALID = {"policy": "timeout", "page_size": 4, "timeout_base_s": 2.0, "timeout_per_ki_token_s": 0.1, "timeout_max_s": 30.0}


pytestmark = pytest.mark.needs("configure")  # configuration goes through the implementation's own entry point


def configure_or_skip(impl):
    configure = getattr(impl, "configure", None)
    assert callable(configure), f"test setup: {impl.name} has no configure(fields), yet its test was collected"
    return configure


def rejected(impl, fields: dict, clause: str) -> str:
    """The one-line error configuring `fields` raises; accepting them breaks `clause`."""
    configure = configure_or_skip(impl)
    # The control: a configure that rejects everything would otherwise pass every rejection test.
    try:
        configure(VALID)
    except ValueError as exc:
        raise AssertionError(f"{clause}: the valid fields {VALID} were rejected, so a rejection means nothing: {exc}") from None
    try:
        configure(fields)
    except ValueError as exc:
        message = str(exc)
    else:
        pytest.fail(f"{clause}: {impl.name} accepted {fields}{ignored(impl, fields)}")
    assert message and "\n" not in message, f"the error for {fields} must be one line, got {message!r}"
    return message


def ignored(impl, fields: dict) -> str:
    """Why the implementation accepted `fields`, where it declares a field it accepts and never reads (ADAPTERS.md)."""
    declared = getattr(impl, "ignored_fields", None) or {}
    causes = [f"{name} is accepted and ignored ({'; '.join(declared[name])})" for name in fields if name in declared and fields[name] != VALID.get(name)]
    return f": {'; '.join(causes)}" if causes else ""


@pytest.mark.weak("accepting valid fields is configuration plumbing, no rule of C1 or C2; each rejection test checks its own control")
@pytest.mark.parametrize("policy", [p.value for p in Policy])
def test_valid_fields_are_accepted(impl, policy):
    configure_or_skip(impl)({**VALID, "policy": policy})


@pytest.mark.clause("C1")
@pytest.mark.parametrize("bad", ["wait_completed", "", "BEST_EFFORT", None, 1])
def test_unknown_policy_is_rejected(impl, bad):
    message = rejected(impl, {**VALID, "policy": bad}, "C1")
    assert repr(bad) in message, f"C1: the error must name the value {bad!r}: {message}"
    assert "policy" in message, f"C1: the error must name the field: {message}"
    missing = [p.value for p in Policy if p.value not in message]
    assert not missing, f"C1: the error must list the accepted policies (missing {missing}): {message}"


@pytest.mark.clause("C2")
@pytest.mark.parametrize(
    "field, bad",
    [
        ("page_size", 0),
        ("page_size", -4),
        ("page_size", 2.5),
        ("page_size", True),
        ("timeout_base_s", 0.0),
        ("timeout_base_s", -1.0),
        ("timeout_base_s", math.nan),
        ("timeout_per_ki_token_s", -0.1),
        ("timeout_per_ki_token_s", math.inf),
        ("timeout_max_s", 0.0),
        ("timeout_max_s", -30.0),
        ("timeout_max_s", math.inf),
    ],
)
def test_bad_numeric_field_is_rejected(impl, field, bad):
    message = rejected(impl, {**VALID, field: bad}, "C2")
    assert field in message, f"C2: the error must name the field {field}: {message}"
    assert repr(bad) in message, f"C2: the error must name the value {bad!r}: {message}"


@pytest.mark.clause("C2")
def test_max_below_base_is_rejected(impl):
    message = rejected(impl, {**VALID, "timeout_base_s": 5.0, "timeout_max_s": 2.0}, "C2")
    assert "timeout_max_s" in message and "2.0" in message, f"C2: the error must name timeout_max_s and its value 2.0: {message}"


@pytest.mark.clause("C2")
def test_unknown_field_is_rejected(impl):
    message = rejected(impl, {**VALID, "timeout_bsae_s": 1.0}, "C2")
    assert "timeout_bsae_s" in message, f"C2: the error must name the unknown field: {message}"

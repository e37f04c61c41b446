"""Capability checks: a test needing something an adapter does not declare skips, saying so."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.errors import ConformanceError
from conformance.adapter import CAPABILITIES


class UnknownCapability(ConformanceError, ValueError):
    """A test asked for a capability the adapter protocol does not define (a test bug)."""


def require(impl: Any, *capabilities: str) -> None:
    """Skip the running test unless adapter `impl` declares every one of `capabilities`."""
    unknown = [c for c in capabilities if c not in CAPABILITIES]
    if unknown:
        raise UnknownCapability(f"invalid capability: {unknown!r} (accepted: {', '.join(sorted(CAPABILITIES))})")
    missing = [c for c in capabilities if c not in impl.capabilities]
    if missing:
        detail = "; ".join(f"{c}: {CAPABILITIES[c]}" for c in missing)
        pytest.skip(f"adapter {impl.name!r} does not declare capability {', '.join(missing)} ({detail})")

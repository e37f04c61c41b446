"""The harness's error root: everything conformance/ raises on purpose is a ConformanceError.

A ConformanceFailure is a finding (a clause broken, a scenario that could not
drive the implementation where it meant to, a wait that ran out): it is an
AssertionError, so pytest reports it as a failed test, not an error in the
harness. Bad input to the harness's own tools is a spec.errors.ConfigError,
shared with the caches so that one line says field, value and what is accepted.
"""

from __future__ import annotations


class ConformanceError(Exception):
    """Base class of every error the harness raises on purpose."""


class ConformanceFailure(ConformanceError, AssertionError):
    """A finding about the implementation under test, reported as a failed test."""

"""The suite's fixtures and per-test hooks (conformance/plugin/fixtures.py), for the tests of this package only.

pytest scopes a conftest's fixtures and hooks to its folder: tests elsewhere in
the same session keep their own `impl`, `device` or `clock`. The options and
the matrix come from the pytest plugin (conformance/plugin/__init__.py).
"""

from conformance.plugin.fixtures import *  # noqa: F401,F403

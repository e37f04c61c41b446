"""Every bound the harness and its tests wait under, in one place, scaled by one knob.

Nothing in the suite orders events by sleeping; every wait is bounded and
fails naming what did not happen. On a loaded machine those bounds may need
to grow, all together: set HICACHE_CONFORMANCE_TIME_SCALE to a number > 0
(2 doubles every bound). A bad value is one error line when pytest starts.
Bounds on the injected clock (timeouts, io_timeout_s) are simulated time and
are not scaled.
"""

from __future__ import annotations

import math
import os

from spec.errors import ConfigError

SCALE_ENV = "HICACHE_CONFORMANCE_TIME_SCALE"


def time_scale(environ: dict | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(SCALE_ENV, "1")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(SCALE_ENV, raw, "a finite number > 0 (a factor on every wait's bound)")
    return value


try:
    SCALE = time_scale()
except ConfigError:
    SCALE = 1.0  # reported as a usage error by the plugin at configure time (conformance/plugin/__init__.py)


def bound(seconds: float) -> float:
    """A wall-clock bound of `seconds` on an unloaded machine, scaled."""
    return seconds * SCALE


WAIT_S = bound(20.0)  # a thread reaching a gate, an IO ending, a call returning
HANG_S = bound(5.0)  # a multi-rank run in which no rank makes progress
COLLECTIVE_S = bound(30.0)  # one collective or store wait across ranks
STARTUP_S = bound(90.0)  # rank processes starting (importing torch and the implementation)
LAUNCH_S = bound(300.0)  # one multi-rank launch, all its scenarios
EXIT_S = bound(10.0)  # a thread or process told to stop (or killed) ending
TEST_S = bound(900.0)  # one conformance test end to end, a backstop for a wait inside code nobody here wrote (plugin/watchdog.py)

"""Which of upstream's two architectures a decision method belongs to.

The fork's vote per check: `can_terminate_prefetch` computes KV completion,
votes, and reduces the vote; its pool-transfer guard lives there (HC101-HC103,
HC107). SGLang 0.5.2x's ACK drain: the decision votes only the timeout (it
never reads completion) and an ACK drain commits what landed; the guard lives
in the commit methods (HC108). A class is taken for the second when its
decision reads no completion and it defines one of the commit methods; a
configured `guard` decides instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import libcst as cst

from lint.config import Config, Implementation
from lint.cstutil import reads_completion
from lint.locate import MethodSite


def implementation(config: Config, configured: Optional[Implementation], display: str,
                   site: MethodSite, decision: cst.FunctionDef) -> Optional[Implementation]:
    """The implementation this method is: as configured, or recognized as an ACK drain (None: a plain decision)."""
    if configured is not None and configured.guard is not None:
        return configured
    listed = configured.commit if configured is not None and configured.commit else ()
    present = listed or tuple(n for n in config.commit_methods if n in site.index.methods)
    if present and not reads_completion(decision):
        base = configured or config.recognized(display, site.class_qualname, site.method)
        return replace(base, guard="commit", commit=present)
    return replace(configured, guard="decision") if configured is not None else None

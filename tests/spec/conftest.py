"""The spec's tests share hand-built trace helpers (test_invariants.Run): importable from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

"""The linter over this repository's own implementations: CI fails if a guard goes."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_configured_implementation_keeps_its_guard():
    proc = subprocess.run([sys.executable, "-m", "lint", "--repo"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_known_bad_variants_are_flagged():
    proc = subprocess.run([sys.executable, "-m", "lint", "caches/variants"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    codes = {line.split()[1] for line in proc.stdout.splitlines() if line.strip()}
    assert {"HC101", "HC102", "HC103"} <= codes, proc.stdout

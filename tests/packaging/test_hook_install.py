"""The published pre-commit hook, installed by real pre-commit from a local clone.

A user's repository lists this project's hook at a commit; `git commit` runs it
in the environment pre-commit builds from our package. That environment must
hold the linter and nothing heavy (no torch), and a commit that removes a guard
must be blocked, naming the rule.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a hook environment (pip, network or cache)

REPO = Path(__file__).resolve().parents[2]
# the environment running the tests holds pre-commit (the test extra), on PATH or not
PRE_COMMIT = shutil.which("pre-commit", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))

GUARDED = '''\
class MyCache:
    def can_terminate_prefetch(self, operation):
        if self.prefetch_stop_policy == "best_effort":
            return True
        completed = bool(operation.hash_value) and operation.completed_tokens == len(operation.hash_value) * self.page_size
        if completed and operation.pool_transfers and not operation.pool_transfers_done:
            completed = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        else:
            can_terminate = completed or self.timed_out(operation)
        states = [1 - int(can_terminate), int(operation.is_terminated())]
        self.group.all_reduce(states)
        return states[0] == 0 or states[1] == 1

    def start_prefetch(self, request, host_indices, pool_transfers):
        return self.controller.prefetch(request, host_indices, extra_pools=pool_transfers)
'''


CONTROLLER = """class PrefetchOperation:
    def __init__(self, request_id, host_indices, pool_transfers=None):
        self.request_id = request_id
        self.host_indices = host_indices
        self.pool_transfers = pool_transfers
        self.pool_transfers_done = not pool_transfers
"""


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory) -> tuple[Path, dict]:
    if PRE_COMMIT is None:
        pytest.fail("pre-commit is not installed: it is a test dependency (pip install -e '.[test]')")
    base = tmp_path_factory.mktemp("hook")
    clone = base / "hicache-conformance"
    # A clone of what is committed here: the hook as a user would pin it.
    assert git(base, "clone", "-q", str(REPO), str(clone)).returncode == 0
    rev = git(clone, "rev-parse", "HEAD").stdout.strip()
    user = base / "user"
    user.mkdir()
    git(user, "init", "-q")
    (user / "pyproject.toml").write_text('[tool.hicache-lint]\nimplementations = ["cache.py::MyCache.can_terminate_prefetch"]\n')
    (user / "cache.py").write_text(GUARDED)
    (user / "operation.py").write_text(CONTROLLER)  # where the completion flag is defined
    (user / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {clone}\n    rev: {rev}\n    hooks:\n      - id: hicache-lint-repo\n")
    env = {**os.environ, "PRE_COMMIT_HOME": str(base / "pre-commit-home"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    installed = subprocess.run([PRE_COMMIT, "install"], cwd=user, env=env, capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return user, env


def commit(user: Path, env: dict, message: str) -> subprocess.CompletedProcess:
    git(user, "add", "-A")
    proc = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", message],
                          cwd=user, env=env, capture_output=True, text=True, timeout=900)
    return proc


def test_hook_passes_a_guarded_implementation_then_blocks_removing_the_guard(user_repo):
    user, env = user_repo
    first = commit(user, env, "guarded")
    assert first.returncode == 0, f"the hook refused a guarded implementation:\n{first.stdout}{first.stderr}"
    unguarded = GUARDED.replace(
        "        if completed and operation.pool_transfers and not operation.pool_transfers_done:\n            completed = False\n", "")
    assert unguarded != GUARDED
    (user / "cache.py").write_text(unguarded)
    second = commit(user, env, "drop the guard")
    out = second.stdout + second.stderr
    assert second.returncode != 0, f"the hook let a commit remove the guard:\n{out}"
    assert "HC101" in out and "cache.py" in out, out
    assert git(user, "rev-list", "--count", "HEAD").stdout.strip() == "1", "the blocked commit must not exist"


SAMPLES = REPO / "tests" / "lint" / "samples" / "upstream"
MEM_CACHE = Path("python", "sglang", "srt", "mem_cache")
SGLANG_FILES = {"hiradix_cache.py": "hiradix_fixed.py.txt", "unified_radix_cache.py": "unified_radix.py.txt",
                "hi_mamba_radix_cache.py": "hi_mamba_radix.py.txt"}
HIRADIX_GUARD = ('        if (\n            completed\n            and getattr(operation, "pool_transfers", None)\n'
                 '            and not getattr(operation, "pool_transfers_done", True)\n        ):\n'
                 '            can_terminate = False\n')


@pytest.fixture(scope="module")
def sglang_repo(user_repo) -> tuple[Path, dict]:
    """A repository laid out like SGLang's: the caches under python/sglang/srt/mem_cache, the
    configuration block (a baseline) in python/pyproject.toml, pre-commit at the root."""
    first_user, env = user_repo
    base = first_user.parent
    clone = base / "hicache-conformance"
    rev = git(clone, "rev-parse", "HEAD").stdout.strip()
    repo = base / "sglang"
    (repo / MEM_CACHE).mkdir(parents=True)
    git(repo, "init", "-q")
    for name, sample in SGLANG_FILES.items():
        (repo / MEM_CACHE / name).write_text((SAMPLES / sample).read_text())
    (repo / "python" / "sglang" / "srt" / "managers").mkdir()
    (repo / "python" / "sglang" / "srt" / "managers" / "cache_controller.py").write_text(CONTROLLER)
    (repo / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\n\n[tool.hicache-lint]\nbaseline = "hicache-lint-baseline.json"\n')
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {clone}\n    rev: {rev}\n    hooks:\n      - id: hicache-lint-repo\n")
    # the baseline holds what the code base has today (UnifiedRadixCache's uncapped timeout, HC104)
    written = subprocess.run([sys.executable, "-m", "lint", "--repo", "--write-baseline",
                              "python/hicache-lint-baseline.json"], cwd=repo, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert written.returncode == 0, written.stdout + written.stderr
    installed = subprocess.run([PRE_COMMIT, "install"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return repo, env


def test_on_sglangs_layout_a_baseline_gives_a_passing_hook_that_shows_its_warnings(sglang_repo):
    repo, env = sglang_repo
    first = commit(repo, env, "adopt hicache-lint")
    out = first.stdout + first.stderr
    assert first.returncode == 0, f"the hook refused the baselined code base:\n{out}"
    assert out.count(" HC107 ") == 3 and "HC104" not in out, out  # the warnings show on a pass
    assert "3 methods checked" in out and "1 more in the baseline" in out, out
    hiradix = repo / MEM_CACHE / "hiradix_cache.py"
    text = hiradix.read_text()
    assert HIRADIX_GUARD in text
    hiradix.write_text(text.replace(HIRADIX_GUARD, ""))
    second = commit(repo, env, "drop HiRadixCache's guard")
    out = second.stdout + second.stderr
    assert second.returncode != 0, f"the hook let a commit remove the guard:\n{out}"
    assert "HC101" in out and "hiradix_cache.py" in out and "cache_controller.py" in out, out
    assert git(repo, "rev-list", "--count", "HEAD").stdout.strip() == "1", "the blocked commit must not exist"


def test_hook_environment_holds_the_linter_and_no_torch(user_repo):
    user, env = user_repo
    home = Path(env["PRE_COMMIT_HOME"])
    envs = list(home.glob("repo*/py_env-*"))
    assert envs, f"pre-commit built no python hook environment under {home}"
    for hook_env in envs:
        python = hook_env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
        listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, timeout=120)
        names = {line.split("==")[0].lower() for line in listed.stdout.splitlines() if line}
        assert "libcst" in names and "hicache-conformance" in names, names
        heavy = names & {"torch", "pytest", "pytest-xdist", "triton", "hypothesis"}
        assert not heavy, f"the hook environment installs {sorted(heavy)}: the linter needs only libcst"

"""[tool.hicache-lint]: discovery, validation, enable/disable, --repo."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lint import config as config_mod
from lint.api import lint_repo, lint_source
from lint.config import Config, Implementation
from lint.errors import LintConfigError
from lint.selection import selection

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = {
    "caches/hiradix.py": ("upstream/hiradix_fixed.py.txt", "HiRadixCache"),
    "caches/unified_radix.py": ("upstream/unified_radix.py.txt", "UnifiedRadixCache"),
    "caches/hi_mamba_radix.py": ("upstream/hi_mamba_radix.py.txt", "HiMambaRadixCache"),
}


def write_pyproject(directory: Path, body: str) -> Path:
    path = directory / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n\n[tool.hicache-lint]\n" + body)
    return path


def test_defaults_know_both_upstream_architectures():
    config = Config()
    # the fork's vote per check, and 0.5.2x's timeout-only decision with its ACK drain
    assert config.methods == ("can_terminate_prefetch", "_can_terminate_prefetch")
    assert config.commit_methods == ("_handle_prefetch_result", "_drain_storage_control_queues_impl",
                                     "release_aborted_request")
    assert config.sidecar_fields == ("pool_transfers", "comp_xfers")
    assert config.reduce_calls == ("all_reduce", "all_reduce_max", "all_reduce_min")
    assert config.implementations == ()
    assert all(selection(config).enabled(code) for code in ("HC101", "HC104", "HC106"))


def test_this_repository_lists_the_three_implementations():
    config = config_mod.load_file(REPO / "pyproject.toml")
    assert config.implementations == (
        Implementation("caches/hiradix.py", "HiRadixCache", "can_terminate_prefetch", fenced=True, extra_pools=True),
        Implementation("caches/unified_radix.py", "UnifiedRadixCache", "can_terminate_prefetch", fenced=True,
                       extra_pools=True),
        Implementation("caches/hi_mamba_radix.py", "HiMambaRadixCache", "can_terminate_prefetch", fenced=True,
                       extra_pools=True),
    )
    assert config.root == REPO


def test_discovery_walks_up_past_pyprojects_without_the_table(tmp_path):
    write_pyproject(tmp_path, 'methods = ["stop_now"]\n')
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    config = config_mod.find([], inner)
    assert config.methods == ("stop_now",)
    assert config.root == tmp_path.resolve()


def test_no_config_found_gives_defaults(tmp_path):
    config = config_mod.find([], tmp_path)
    assert config.methods == Config().methods and config.source is None


def test_discovery_starts_from_the_linted_files(tmp_path, run_cli):
    # SGLang's layout: the table in python/pyproject.toml, the run from the repository root
    (tmp_path / ".git").mkdir()
    python = tmp_path / "python"
    (python / "pkg").mkdir(parents=True)
    write_pyproject(python, 'methods = ["stop_now"]\n')
    (python / "pkg" / "cache.py").write_text("class C:\n    def stop_now(self, op):\n        return op.completed_tokens > 0\n")
    assert config_mod.find(["python/pkg/cache.py"], tmp_path).source == python / "pyproject.toml"
    # with no path (--repo), the one table a level below the repository root
    assert config_mod.find([], tmp_path).source == python / "pyproject.toml"
    proc = run_cli("python/pkg/cache.py", cwd=tmp_path)
    assert proc.returncode == 0 and proc.summary.startswith("hicache-lint: 1 method checked"), proc.stderr
    other = tmp_path / "other"
    other.mkdir()
    write_pyproject(other, 'methods = ["x"]\n')
    (other / "a.py").write_text("x = 1\n")
    proc = run_cli("python/pkg/cache.py", "other/a.py", cwd=tmp_path)
    assert proc.returncode == 2 and "fall under two [tool.hicache-lint] tables" in proc.errors, proc.stderr
    with pytest.raises(LintConfigError, match="several pyproject.toml files below the repository root"):
        config_mod.find([], tmp_path)


@pytest.mark.parametrize(
    "body, fragments",
    [
        ('method = ["x"]\n', ["unknown key 'method'", "['x']", "accepted keys: methods, reduce-calls"]),
        ('methods = "can_terminate_prefetch"\n', ["methods = 'can_terminate_prefetch'", "expected a list of strings"]),
        ("methods = []\n", ["methods = []", "at least one entry"]),
        ('methods = ["not a name"]\n', ["'not a name'", "method names"]),
        ("reduce-calls = [1]\n", ["reduce-calls = [1]", "list of strings"]),
        ('implementations = ["caches/x.py:HiRadix"]\n', ["'caches/x.py:HiRadix'", "path/to/file.py::Class.method"]),
        ('fail-on-warnings = "yes"\n', ["fail-on-warnings = 'yes'", "true or false"]),
        ('implementations = [{method = "a.py::A.m", fence = true}]\n', ["unknown key 'fence'", "fenced"]),
        ('implementations = [{method = "a.py::A.m", fenced = 1}]\n', ["fenced = 1", "true or false"]),
        ('implementations = [{method = "a.py::A.m", guard = "commit"}]\n', ["guard = 'commit' needs commit"]),
        ('implementations = [{method = "a.py::A.m", guard = "vote"}]\n', ["guard = 'vote'", "decision, commit"]),
        ('implementations = [{method = "a.py::A.m", guard = "commit", commit = ["c"], io-ended = "completed_req"}]\n',
         ["implementations.io-ended = 'completed_req'", "list of strings", "true once an operation's IO has ended"]),
        ('implementations = [{method = "a.py::A.m", guard = "commit", commit = ["c"], allocation-fields = ["a b"]}]\n',
         ["implementations.allocation-fields", "'a b'", "attribute names holding an operation's allocated hit"]),
        ('implementations = [{method = "a.py::A.m", io_ended = ["x"]}]\n', ["unknown key 'io_ended'", "io-ended"]),
        ('implementations = [{fenced = true}]\n', ["{'fenced': True}", "path/to/file.py::Class.method"]),
        ('implementations = "a.py::A.m"\n', ["implementations = 'a.py::A.m'", "expected a list"]),
        ("disable = 3\n", ["disable = 3", "rule codes"]),
        ('select = ["HC1"]\nenable = ["HC101"]\n', ["enable is the older name of select"]),
        ('per-file-ignores = ["tests/"]\n', ["per-file-ignores = ['tests/']", "a table of glob"]),
        ('per-file-ignores = {"tests/" = "HC104"}\n', ["per-file-ignores: tests/ = 'HC104'", "list of strings"]),
        ('exclude = "venv"\n', ["exclude = 'venv'", "glob patterns"]),
        ('respect-gitignore = "no"\n', ["respect-gitignore = 'no'", "true or false"]),
        ("baseline = 3\n", ["baseline = 3", "a file name"]),
        ('implementations = [{method = "a.py::A.m", extra-pools = "yes"}]\n', ["extra-pools = 'yes'", "true or false"]),
        ('commit-methods = ["a-b"]\n', ["commit-methods: entry 'a-b'", "method names"]),
        ('completion-flag = "pool transfers done"\n', ["completion-flag = 'pool transfers done'", "one identifier"]),
        ('completion-flag = ["pool_io_done"]\n', ["completion-flag = ['pool_io_done']", "one identifier"]),
    ],
)
def test_invalid_values_name_field_value_and_accepted(tmp_path, body, fragments):
    path = write_pyproject(tmp_path, body)
    with pytest.raises(LintConfigError) as info:
        config_mod.load_file(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: error: ")
    for fragment in fragments:
        assert fragment in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("body, fragments", [
    ('select = ["HC999"]\n', ["select: unknown rule 'HC999'", "HC101", "ALL"]),
    ('ignore = ["HC3"]\n', ["ignore: unknown rule 'HC3'"]),
    ('per-file-ignores = {"tests/*" = ["guard-gone"]}\n', ["per-file-ignores 'tests/*': unknown rule 'guard-gone'"]),
])
def test_unknown_rules_are_named_when_the_selection_is_resolved(tmp_path, body, fragments):
    path = write_pyproject(tmp_path, body)
    with pytest.raises(LintConfigError) as info:
        selection(config_mod.load_file(path))
    assert str(info.value).startswith(f"{path}: error: ")
    assert all(fragment in str(info.value) for fragment in fragments), str(info.value)


def test_implementation_tables(tmp_path):
    path = write_pyproject(tmp_path, (
        'fail-on-warnings = true\n'
        'implementations = [\n'
        '    "a.py::A.can_terminate_prefetch",\n'
        '    {method = "b.py::B.can_terminate_prefetch", fenced = true},\n'
        '    {method = "c.py::C._can_terminate_prefetch", guard = "commit", commit = ["_handle_prefetch_result"]},\n'
        '    {method = "d.py::D.m", guard = "commit", commit = ["c"], io-ended = [], allocation-fields = ["kv"]},\n'
        ']\n'))
    config = config_mod.load_file(path)
    assert config.fail_on_warnings is True
    a, b, c, d = config.implementations
    assert (a.fenced, a.guard, a.commit) == (False, None, ())  # None: the class's architecture decides
    assert (b.fenced, str(b)) == (True, "b.py::B.can_terminate_prefetch")
    assert (c.guard, c.commit, c.sidecar_fields) == ("commit", ("_handle_prefetch_result",),
                                                     ("pool_transfers", "comp_xfers"))
    assert (c.io_ended, c.allocation_fields) == (("completed_req",), ("host_indices",))
    assert (d.io_ended, d.allocation_fields) == ((), ("kv",))  # an implementation without a final ACK signal
    assert config.implementation_for(tmp_path / "b.py", "B") == b
    assert config.implementation_for(tmp_path / "b.py", "A") is None
    assert config.implementation_for(tmp_path / "sub" / "b.py", "B") is None


def test_invalid_toml_and_missing_table(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[tool.hicache-lint\n")
    with pytest.raises(LintConfigError, match="invalid TOML"):
        config_mod.load_file(bad)
    empty = tmp_path / "empty.toml"
    empty.write_text("[tool.other]\nx = 1\n")
    with pytest.raises(LintConfigError, match=r"no \[tool.hicache-lint\] table"):
        config_mod.load_file(empty)
    with pytest.raises(LintConfigError, match="not found"):
        config_mod.load_file(tmp_path / "absent.toml")


def test_select_and_ignore_by_code_prefix_or_name(tmp_path):
    path = write_pyproject(tmp_path, 'enable = ["guard-missing", "HC102"]\ndisable = ["HC102"]\n')
    config = config_mod.load_file(path)
    rules = selection(config)
    assert rules.enabled("HC101") and not rules.enabled("HC102") and not rules.enabled("HC103")
    text = '''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value)
        return completed

    def start(self, op, transfers):
        op.pool_transfers, op.pool_transfers_done = transfers, not transfers
'''
    assert [f.code for f in lint_source(text, config).findings] == ["HC101"]
    assert lint_source(text, Config(ignore=("HC101",))).findings == []
    prefixed = selection(Config(select=("HC10",), ignore=("guard-missing",)))
    assert prefixed.enabled("HC102") and prefixed.enabled("HC108") and not prefixed.enabled("HC101")
    # the command line goes on top of the configuration, as ruff's flags do
    flags = selection(config, select=["HC1"], extend_select=[], ignore=["HC104"])
    assert flags.enabled("HC108") and not flags.enabled("HC104")


def test_per_file_ignores_match_globs_relative_to_the_configuration(tmp_path):
    path = write_pyproject(tmp_path, 'per-file-ignores = {"tests/" = ["HC104"], "*_double.py" = ["HC1"]}\n')
    rules = selection(config_mod.load_file(path))
    assert not rules.enabled("HC104", str(tmp_path / "tests" / "deep" / "x.py"))
    assert rules.enabled("HC104", str(tmp_path / "src" / "x.py"))
    assert not rules.enabled("HC101", str(tmp_path / "src" / "cache_double.py"))
    assert rules.enabled("HC101", str(tmp_path / "src" / "cache.py"))


def make_repo(tmp_path: Path, samples: Path, skip: str | None = None) -> Path:
    lines = []
    for rel, (sample, cls) in UPSTREAM.items():
        lines.append(f'    "{rel}::{cls}.can_terminate_prefetch",')
        if rel != skip:
            target = tmp_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(samples / sample, target)
    write_pyproject(tmp_path, "implementations = [\n" + "\n".join(lines) + "\n]\n")
    return tmp_path


def test_repo_mode_lints_the_configured_implementations(tmp_path, samples, run_cli):
    make_repo(tmp_path, samples)
    config = config_mod.find([], tmp_path)
    result = lint_repo(config)
    assert result.errors == []
    assert [(Path(f.path).name, f.code) for f in result.findings] == [
        ("hi_mamba_radix.py", "HC107"), ("hiradix.py", "HC107"),
        ("unified_radix.py", "HC104"), ("unified_radix.py", "HC107")]
    assert result.methods == 3
    proc = run_cli("--repo", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "caches/unified_radix.py:68:9: HC104 [error] alignment drift in 'timeout-cap'" in proc.stdout


def test_repo_mode_missing_file_class_or_method_is_an_error(tmp_path, samples, run_cli):
    make_repo(tmp_path, samples, skip="caches/hiradix.py")
    unified = tmp_path / "caches/unified_radix.py"
    unified.write_text(unified.read_text().replace("class UnifiedRadixCache:", "class UnifiedCache:"))
    mamba = tmp_path / "caches/hi_mamba_radix.py"
    mamba.write_text(mamba.read_text().replace("def can_terminate_prefetch(", "def may_terminate_prefetch("))
    proc = run_cli("--repo", cwd=tmp_path)
    assert proc.returncode == 2
    errors = proc.errors.splitlines()
    assert errors == [
        "pyproject.toml: error: implementation "
        "'caches/hi_mamba_radix.py::HiMambaRadixCache.can_terminate_prefetch': "
        "class HiMambaRadixCache has no method can_terminate_prefetch in caches/hi_mamba_radix.py",
        "pyproject.toml: error: implementation 'caches/hiradix.py::HiRadixCache.can_terminate_prefetch': "
        "file caches/hiradix.py does not exist",
        "pyproject.toml: error: implementation "
        "'caches/unified_radix.py::UnifiedRadixCache.can_terminate_prefetch': "
        "class UnifiedRadixCache not found in caches/unified_radix.py",
    ]
    assert "Traceback" not in proc.stderr


def test_repo_mode_without_implementations_lints_the_project(tmp_path, samples, run_cli):
    write_pyproject(tmp_path, 'methods = ["can_terminate_prefetch"]\n')
    proc = run_cli("--repo", cwd=tmp_path)
    assert proc.returncode == 2  # nothing to check: the configuration or the folder is wrong
    assert proc.errors.splitlines() == [
".: error: no Python file in this directory (excluded and git-ignored ones left out); "
        "expected a directory holding *.py files, or pass --allow-empty"]
    assert run_cli("--repo", "--allow-empty", cwd=tmp_path).returncode == 0
    (tmp_path / "pkg").mkdir()
    shutil.copy(samples / "upstream" / "hiradix_fixed.py.txt", tmp_path / "pkg" / "hiradix.py")
    proc = run_cli("--repo", cwd=tmp_path)
    assert proc.returncode == 0 and [line.split()[1] for line in proc.stdout.splitlines()] == ["HC107"]


def test_cli_config_error_is_one_line(tmp_path, run_cli):
    write_pyproject(tmp_path, "methods = 5\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    proc = run_cli("a.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [
        f"{tmp_path / 'pyproject.toml'}: error: [tool.hicache-lint] methods = 5: "
        "expected a list of strings (method names)"
    ]
    other = tmp_path / "other.toml"
    other.write_text("[tool.hicache-lint]\nmethods = ['x']\n")
    proc = run_cli("--config", str(other), "a.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_this_repository_passes_its_own_repo_wide_check(monkeypatch):
    config = config_mod.load_file(REPO / "pyproject.toml")
    missing = [i for i in config.implementations if not (REPO / i.path).is_file()]
    if missing:
        pytest.skip(f"implementations not written yet: {', '.join(map(str, missing))}")
    monkeypatch.chdir(REPO)
    result = lint_repo(config)
    assert result.errors == []
    assert [str(f) for f in result.findings] == []
    assert result.methods >= 3


def test_config_error_in_machine_formats_is_still_a_document(tmp_path, run_cli):
    import json

    write_pyproject(tmp_path, "colour = 'red'\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    proc = run_cli("--format", "json", "a.py", cwd=tmp_path)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["findings"] == [] and "unknown key 'colour'" in doc["errors"][0]["message"]
    assert len(proc.errors.splitlines()) == 1

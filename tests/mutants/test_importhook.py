"""The import hook applies a mutant in a fresh interpreter and in a forkserver child, never touching the file on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conformance.mutants import importhook

ORIGINAL = "VALUE = 'original'\n\ndef value():\n    return VALUE\n"
MUTATED = ORIGINAL.replace("'original'", "'mutated'")
TIMEOUT_S = 120


def setup(tmp_path: Path, source: str = MUTATED) -> tuple[dict[str, str], Path]:
    """A module on the path, a run folder holding its mutant, and the environment that applies it."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe_mod.py").write_text(ORIGINAL, encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    record = importhook.write_record(run, module="probe_mod", file=str(code / "probe_mod.py"), source=source)
    site = importhook.write_site(run)
    env = {k: v for k, v in os.environ.items() if k != importhook.MUTANT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(code), env.get("PYTHONPATH")) if p)
    env[importhook.MUTANT_ENV] = str(record)
    return env, run


def python(env: dict[str, str], script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_a_subprocess_imports_the_mutated_module(tmp_path):
    env, run = setup(tmp_path)
    done = python(env, "import probe_mod; print(probe_mod.value(), probe_mod.__file__)")
    assert done.returncode == 0, done.stderr
    value, file = done.stdout.split()
    assert value == "mutated" and file == str(tmp_path / "code" / "probe_mod.py")  # under its own name
    assert (tmp_path / "code" / "probe_mod.py").read_text(encoding="utf-8") == ORIGINAL
    assert not list((tmp_path / "code").glob("__pycache__/probe_mod*"))  # no bytecode of the mutant left behind
    assert len(importhook.markers(run, importhook.APPLIED)) == 1


def test_without_the_record_the_module_is_the_original(tmp_path):
    env, run = setup(tmp_path)
    del env[importhook.MUTANT_ENV]
    done = python(env, "import probe_mod; print(probe_mod.value())")
    assert done.stdout.strip() == "original", done.stderr
    assert importhook.markers(run, importhook.APPLIED) == []


# The rank processes of the multi-rank tests come from conformance.multirank.processes.process_context:
# a forkserver that preloads the cache's modules (or spawn where there is none). The child must see the mutant.
FORKSERVER = """
import os, probe_mod
from conformance.multirank.processes import process_context

def report(queue):
    import probe_mod
    queue.put((os.getpid(), probe_mod.value()))

if __name__ == "__main__":
    ctx = process_context(preload=["probe_mod"])
    queue = ctx.Queue()
    child = ctx.Process(target=report, args=(queue,))
    child.start()
    pid, value = queue.get(timeout=60)
    child.join(60)
    print(ctx.get_start_method(), pid != os.getpid(), value)
"""


def test_a_forkserver_child_sees_the_mutant(tmp_path):
    env, run = setup(tmp_path)
    script = tmp_path / "ranks.py"
    script.write_text(FORKSERVER, encoding="utf-8")
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parents[2])  # this checkout's conformance
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    method, other_process, value = done.stdout.split()
    assert (other_process, value) == ("True", "mutated")
    # The parent and the forkserver each executed the mutated module (the child was forked from the server).
    assert len(importhook.markers(run, importhook.APPLIED)) == (2 if method == "forkserver" else 3)


def test_a_module_that_raises_while_importing_is_marked_stillborn(tmp_path):
    env, run = setup(tmp_path, source=ORIGINAL + "raise RuntimeError('no such name')\n")
    done = python(env, "import probe_mod")
    assert done.returncode != 0 and "no such name" in done.stderr
    assert importhook.markers(run, importhook.STILLBORN) == ["RuntimeError: no such name"]
    assert importhook.markers(run, importhook.APPLIED) == []


def test_a_sitecustomize_the_hook_shadows_still_runs(tmp_path):
    env, run = setup(tmp_path)
    own = tmp_path / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITECUSTOMIZE_RAN = True\n", encoding="utf-8")
    env["PYTHONPATH"] += os.pathsep + str(own)
    done = python(env, "import builtins, probe_mod; print(getattr(builtins, 'OWN_SITECUSTOMIZE_RAN', False), probe_mod.value())")
    assert done.stdout.split() == ["True", "mutated"], done.stderr


def test_the_hook_goes_back_in_front_of_finders_inserted_after_it(tmp_path):
    env, _ = setup(tmp_path)
    script = (
        "import sys, importlib.machinery as m\n"
        "class Claims(m.PathFinder): pass\n"  # stands for pytest's assertion rewriter: it claims the module first
        "sys.meta_path.insert(0, Claims)\n"
        "from conformance.mutants.importhook import take_precedence\n"
        "take_precedence()\n"
        "import probe_mod; print(probe_mod.value())\n"
    )
    env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parents[2])
    assert python(env, script).stdout.strip() == "mutated"
    unfixed = python(env, script.replace("take_precedence()\n", ""))
    assert unfixed.stdout.strip() == "original", unfixed.stderr  # without it the other finder wins: the check above can fail

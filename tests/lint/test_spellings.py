"""Every real-world spelling is recognized, right and wrong, and normalizes alike."""

from __future__ import annotations

import itertools

import pytest

from lint.api import Linter, fix_source, lint_source
from lint.config import Config

PARAMS = ["operation", "op", "prefetch_op"]
VOTES = ["can_terminate", "vote", "ok_to_stop"]
PREDICATES = {
    "direct": "{P} = len({O}.hash_value) > 0 and {O}.completed_tokens == len({O}.hash_value) * self.page_size",
    "helper": "{P} = self._prefetch_completed({O})",
    "two-step": "done_tokens = {O}.completed_tokens\n{P} = done_tokens >= len({O}.hash_value) * self.page_size",
    "if-else": (
        "if len({O}.hash_value) == 0:\n    {P} = False\nelse:\n"
        "    {P} = {O}.completed_tokens == len({O}.hash_value) * self.page_size"
    ),
}
PREDICATE_NAMES = ["completed", "is_done", "kv_complete"]
GUARDS = {
    "if-getattr": (
        'if {P} and getattr({O}, "pool_transfers", None) and not getattr({O}, "pool_transfers_done", True):\n'
        "    {P} = False"
    ),
    "if-attr": "if {P} and {O}.pool_transfers and not {O}.pool_transfers_done:\n    {P} = False",
    "and-assign": "{P} = {P} and (not {O}.pool_transfers or {O}.pool_transfers_done)",
    "and-assign-getattr": '{P} = {P} and getattr({O}, "pool_transfers_done", True)',
    "iand": "{P} &= {O}.pool_transfers_done",
    "alias-done": "extras_done = {O}.pool_transfers_done\nif not extras_done:\n    {P} = False",
    "alias-pending": (
        "extras_pending = bool({O}.pool_transfers) and not {O}.pool_transfers_done\n"
        "if {P} and extras_pending:\n    {P} = False"
    ),
    "nested": "if {P} and {O}.pool_transfers:\n    if not {O}.pool_transfers_done:\n        {P} = False",
    "eq-false": "if {P} and {O}.pool_transfers_done == False:\n    {P} = False",
    "is-not-true": "if {P} and {O}.pool_transfers_done is not True:\n    {P} = False",
}
REDUCES = {
    "torch": (
        "states = torch.tensor([1 - int({V}), int(terminated)], dtype=torch.int)\n"
        "torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)\n"
        "{V} = states[0].item() == 0\nterminated = states[1].item() == 1"
    ),
    "dist": (
        "states = torch.tensor([1 - int({V}), int(terminated)])\n"
        "dist.all_reduce(states, op=dist.ReduceOp.MAX)\n"
        "{V} = states[0].item() == 0\nterminated = states[1].item() == 1"
    ),
    "reducer": (
        "vote_no, terminated = self.reducer.all_reduce_max(\n"
        '    [1 - int({V}), int(terminated)], name="prefetch_terminate"\n)\n'
        "{V} = vote_no == 0"
    ),
    "world-size": (
        "if self.world_size > 1:\n"
        "    flags = self.reducer.all_reduce_max([1 - int({V}), int(terminated)], name=\"t\")\n"
        "    {V} = flags[0] == 0\n    terminated = flags[1] == 1"
    ),
}


def indent(block: str, spaces: int) -> str:
    return "\n".join((" " * spaces + line) if line else line for line in block.split("\n"))


def method_source(param="operation", vote="can_terminate", predicate="completed", pred_form="direct",
                  guard="if-getattr", reduce="torch", guard_at="after-predicate") -> str:
    fill = {"O": param, "P": predicate, "V": vote}
    pred = PREDICATES[pred_form].format(**fill)
    guard_text = GUARDS[guard].format(**fill) if guard else ""
    vote_guard = GUARDS[guard].format(**{**fill, "P": vote}) if guard else ""
    lines = [
        "import time",
        "import torch",
        "import torch.distributed as dist",
        "",
        "",
        "class Cache:",
        "    def _prefetch_completed(self, op):",
        "        return op.completed_tokens >= len(op.hash_value) * self.page_size",
        "",
        f"    def can_terminate_prefetch(self, {param}):",
        f"        {vote} = True",
        '        if self.prefetch_stop_policy == "best_effort":',
        f"            return {vote}",
        indent(pred, 8),
    ]
    if guard_at == "after-predicate":
        lines.append(indent(guard_text, 8))
    lines += [
        '        if self.prefetch_stop_policy == "wait_complete":',
        f"            {vote} = {predicate}",
        '        elif self.prefetch_stop_policy == "timeout":',
        f"            limit = min(self.timeout_max, self.timeout_base + len({param}.hash_value))",
        f"            {vote} = {predicate} or time.monotonic() - {param}.start_time > limit",
    ]
    if guard_at == "on-vote":
        lines.append(indent(vote_guard, 8))
    lines.append(f"        terminated = {param}.is_terminated()")
    lines.append(indent(REDUCES[reduce].format(**fill), 8))
    if guard_at == "after-reduce":
        lines.append(indent(guard_text, 8))
    lines += [f"        return {vote} or terminated", ""]
    return "\n".join(lines)


def features(text: str) -> dict:
    linter = Linter(Config())
    analysis = linter.lint_text(text, "x.py")
    assert analysis is not None and len(analysis.methods) == 1
    return {k: f.value for k, f in analysis.methods[0].features.items()}


CANONICAL = features(method_source())


def test_canonical_features():
    assert CANONICAL == {
        "policies": "best_effort, wait_complete, timeout",
        "guard": "present",
        "guard-key": "completion predicate",
        "guard-placement": "effective",
        "combine": "vote OR any-terminated",
        "reduce-op": "MAX",
        "reduce-payload": "[1-vote, terminated]",
        "timeout-cap": "capped by a max",
    }


CASES = (
    [pytest.param({"param": p}, id=f"param-{p}") for p in PARAMS]
    + [pytest.param({"vote": v}, id=f"vote-{v}") for v in VOTES]
    + [pytest.param({"predicate": n}, id=f"predicate-{n}") for n in PREDICATE_NAMES]
    + [pytest.param({"pred_form": f}, id=f"pred-form-{f}") for f in PREDICATES]
    + [pytest.param({"guard": g}, id=f"guard-{g}") for g in GUARDS]
    + [pytest.param({"reduce": r}, id=f"reduce-{r}") for r in REDUCES]
    + [
        pytest.param(dict(zip(("param", "vote", "predicate", "guard", "reduce"), combo)),
                     id="mix-" + "-".join(combo))
        for combo in itertools.islice(
            itertools.product(PARAMS[1:], VOTES[1:], PREDICATE_NAMES[1:], ["iand", "nested", "alias-pending"],
                              ["reducer", "world-size"]),
            0, None, 7,
        )
    ]
)


@pytest.mark.parametrize("variant", CASES)
def test_correct_spelling_is_clean_and_normalizes_alike(variant):
    text = method_source(**variant)
    result = lint_source(text)
    assert result.errors == []
    assert [str(f) for f in result.findings] == []
    assert features(text) == CANONICAL


@pytest.mark.parametrize("guard", list(GUARDS))
def test_each_guard_spelling_keyed_on_the_vote_is_hc102(guard):
    text = method_source(guard=guard, guard_at="on-vote")
    codes = {f.code for f in lint_source(text).findings}
    assert "HC102" in codes
    assert "HC101" not in codes


@pytest.mark.parametrize("guard", list(GUARDS))
@pytest.mark.parametrize("reduce", list(REDUCES))
def test_each_guard_spelling_after_each_reduce_is_hc103(guard, reduce):
    text = method_source(guard=guard, reduce=reduce, guard_at="after-reduce")
    hits = [f for f in lint_source(text).findings if f.code == "HC103"]
    assert len(hits) == 1
    assert "after the cross-rank reduce" in hits[0].message


@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("pred_form", list(PREDICATES))
def test_missing_guard_is_fixed_with_the_files_names(param, pred_form):
    text = method_source(param=param, pred_form=pred_form, guard=None, guard_at="nowhere")
    assert [f.code for f in lint_source(text).findings] == ["HC101"]
    fixed = fix_source(text)
    assert f"and {param}.pool_transfers and not {param}.pool_transfers_done:" in fixed
    assert [str(f) for f in lint_source(fixed).findings] == []
    assert features(fixed) == CANONICAL


@pytest.mark.parametrize("guard", ["if-getattr", "if-attr", "and-assign", "iand", "nested", "alias-pending"])
def test_vote_keyed_guard_is_moved_onto_the_predicate(guard):
    text = method_source(guard=guard, guard_at="on-vote")
    fixed = fix_source(text)
    assert [str(f) for f in lint_source(fixed).findings] == []
    assert features(fixed) == CANONICAL


def test_inverted_check_is_not_a_guard():
    text = method_source(guard="if-attr").replace("and not operation.pool_transfers_done", "and operation.pool_transfers_done")
    assert [f.code for f in lint_source(text).findings] == ["HC101"]


def test_configured_method_names_and_reduce_calls():
    text = method_source().replace("can_terminate_prefetch", "may_stop_prefetch")
    assert lint_source(text).methods == 0
    config = Config(methods=("may_stop_prefetch",))
    assert lint_source(text, config).methods == 1
    custom = method_source(reduce="reducer").replace("self.reducer.all_reduce_max", "self.comm.vote_max")
    plain = {f.code for f in lint_source(custom).findings}
    assert plain == set()  # unknown call: no reduce seen, the guard still counts
    feats = Linter(Config(reduce_calls=("comm.vote_max",)))
    analysis = feats.lint_text(custom, "x.py")
    assert analysis.methods[0].features["reduce-op"].value == "MAX"
    default = Linter(Config()).lint_text(custom, "x.py")
    assert default.methods[0].features["reduce-op"].value == "no reduce"


def test_done_flag_read_through_a_snapshot_local():
    text = '''
class Cache:
    def can_terminate_prefetch(self, operation):
        snapshot = operation.progress()
        completed = snapshot.completed_tokens == len(snapshot.hash_value) * self.page_size
        side_pools_done = snapshot.pool_transfers_done
        if completed and not side_pools_done:
            completed = False
        return completed
'''
    assert lint_source(text).findings == []
    rebound = text.replace("side_pools_done = snapshot.pool_transfers_done\n",
                           "side_pools_done = snapshot.pool_transfers_done\n        side_pools_done = True\n")
    assert rebound != text
    assert [f.code for f in lint_source(rebound).findings] == ["HC101"]


def test_logging_the_predicate_before_the_guard_is_not_a_use():
    text = method_source(guard="if-attr").replace(
        "        if completed and operation.pool_transfers",
        "        if completed:\n            self.log.debug('kv complete for %s', operation)\n"
        "        if completed and operation.pool_transfers",
    )
    assert "self.log.debug" in text
    assert lint_source(text).findings == []
    deciding = text.replace("self.log.debug('kv complete for %s', operation)", "can_terminate = True")
    assert [f.code for f in lint_source(deciding).findings] == ["HC103"]

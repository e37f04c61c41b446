"""What a checkout's models say about attention context parallelism for a class that serves hybrid mamba models,
and what the built-in caches declare: upstream-shaped model files written here, not copied."""

from __future__ import annotations

from pathlib import Path

from caches.adapters import hi_mamba_radix, hiradix, unified_radix
from caches.upstream_decision.deployment import MODELS_DIR, attention_cp_deployment
from conformance.implementations.declarations import declarations

PRECONDITION = "attention_cp_with_dp_attention"

CP_ATTENTION_MODEL = '''from sglang.srt.layers.dp_attention import get_attention_cp_size


class DeepseekV2AttentionMLA:
    def __init__(self):
        self.attn_cp_size = get_attention_cp_size()
'''
MAMBA_MODEL = '''class Qwen3NextGatedDeltaNet:
    """A linear-attention (mamba-style) layer."""
'''
MAMBA_CP_MODEL = '''from sglang.srt.layers.dp_attention import get_attention_cp_rank


class HybridMambaDecoderLayer:
    def __init__(self):
        self.cp_rank = get_attention_cp_rank()
        self.mixer = MambaMixer2()
'''


def _models(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / MODELS_DIR
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return tmp_path


def test_no_mamba_model_reads_an_attention_cp_group_so_the_scenario_is_not_judged_for_hi_mamba(tmp_path):
    root = _models(tmp_path, {"deepseek_v2.py": CP_ATTENTION_MODEL, "qwen3_next.py": MAMBA_MODEL})
    produced, evidence = attention_cp_deployment(root, "hi_mamba_radix")[PRECONDITION]
    assert produced is False
    assert "none of the 1 model files that read an attention context-parallel group (deepseek_v2.py)" in evidence[0]


def test_a_mamba_model_that_reads_an_attention_cp_group_produces_it_citing_both_lines(tmp_path):
    root = _models(tmp_path, {"deepseek_v2.py": CP_ATTENTION_MODEL, "nemotron_h.py": MAMBA_CP_MODEL})
    produced, evidence = attention_cp_deployment(root, "hi_mamba_radix")[PRECONDITION]
    assert produced is True
    assert evidence == (f"{MODELS_DIR}/nemotron_h.py:1: a model that reads an attention context-parallel group",
                        f"{MODELS_DIR}/nemotron_h.py:4: and builds a mamba or linear-attention layer")


def test_attention_classes_and_a_checkout_without_models_declare_nothing(tmp_path):
    root = _models(tmp_path, {"deepseek_v2.py": CP_ATTENTION_MODEL})
    assert attention_cp_deployment(root, "unified_radix") == {}
    assert attention_cp_deployment(root, "hiradix") == {}
    assert attention_cp_deployment(tmp_path / "elsewhere", "hi_mamba_radix") == {}


def test_built_in_hi_mamba_declares_no_attention_cp_and_the_attention_caches_are_judged():
    produced, evidence = declarations(hi_mamba_radix()).deployment[PRECONDITION]
    assert produced is False and evidence[0].startswith("caches/hi_mamba_radix.py: HiMambaRadixCache.runs_attention_context_parallel = False")
    assert PRECONDITION not in declarations(hiradix()).deployment
    assert PRECONDITION not in declarations(unified_radix()).deployment

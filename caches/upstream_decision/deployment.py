"""Which scenario preconditions a checkout's deployment of a class produces, read from the checkout's own models.

Only what the models decide is read here: whether a class that serves hybrid
mamba models can meet attention context parallelism (precondition
attention_cp_with_dp_attention). A model file that reads an attention
context-parallel group and builds a mamba or linear-attention layer says yes,
with its lines; none says no, with the files that read the group. A checkout
without a models folder declares nothing, so the scenario judges the class.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

MODELS_DIR = "python/sglang/srt/models"
# Classes whose models are hybrid mamba (linear-attention) models, by UPSTREAM_CLASSES key.
MAMBA_MODEL_CLASSES = frozenset({"hi_mamba_radix"})

_READS_ATTENTION_CP = re.compile(r"\battn_cp\w*|\battention_cp\w*|get_attention_cp\w*")
_BUILDS_MAMBA = re.compile(r"mamba|gated_delta|linear_attn", re.IGNORECASE)


def _first_line(text: str, pattern: re.Pattern) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.search(line):
            return number
    return None


def attention_cp_deployment(root: Path, key: str) -> Mapping[str, tuple[bool, tuple[str, ...]]]:
    """{precondition: (produced, evidence)} for the class `key` of the checkout at `root`; {} when the models cannot tell."""
    models = Path(root) / MODELS_DIR
    if key not in MAMBA_MODEL_CLASSES or not models.is_dir():
        return {}
    readers: list[str] = []
    for path in sorted(models.glob("*.py")):
        text = path.read_text(errors="replace")
        cp_line = _first_line(text, _READS_ATTENTION_CP)
        if cp_line is None:
            continue
        mamba_line = _first_line(text, _BUILDS_MAMBA)
        if mamba_line is not None:
            shown = f"{MODELS_DIR}/{path.name}"
            return {"attention_cp_with_dp_attention": (True, (
                f"{shown}:{cp_line}: a model that reads an attention context-parallel group",
                f"{shown}:{mamba_line}: and builds a mamba or linear-attention layer",))}
        readers.append(path.name)
    which = f" ({', '.join(readers)})" if readers else ""
    return {"attention_cp_with_dp_attention": (False, (
        f"{MODELS_DIR}/: none of the {len(readers)} model files that read an attention context-parallel group{which} "
        f"builds a mamba or linear-attention layer, and this class serves only models that do",))}

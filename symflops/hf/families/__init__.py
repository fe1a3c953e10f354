"""The families ``symflops import-hf`` reads, one module per group of
related ``model_type`` values, each exporting ``FAMILIES`` (its
:class:`~symflops.hf.families.common.Family` records)."""

from __future__ import annotations

from . import cohere, decoders, deepseek, falcon, gemma, gpt2, gpt_neox, gpt_oss, \
    granite_hybrid, jamba, llama, llama4, moes, olmo, opt, phi, phi3, qwen3_next, qwen_moe, \
    starcoder2
from .common import Family

_MODULES = (gpt2, llama, qwen_moe, gemma, phi3, starcoder2, gpt_neox, falcon, opt, deepseek,
            olmo, cohere, phi, decoders, moes, gpt_oss, llama4, granite_hybrid, jamba, qwen3_next)
FAMILIES: dict[str, Family] = {f.model_type: f for m in _MODULES for f in m.FAMILIES}

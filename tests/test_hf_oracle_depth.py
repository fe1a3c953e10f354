"""The Hugging Face oracle's counts of a deep model, carried from a few of its
layers to its depth (tests/hf_oracle.py: hf_counts, layer_pattern).

A deep model is built at one, two and three repeats of its layer pattern
instead of at its depth; these tests hold that to the model built at its
full depth, read the patterns of three published configs by hand, and show
that a misread pattern fails rather than passes."""

from __future__ import annotations

import pytest

import hf_oracle
from hf_oracle import at_layers, direct_hf_counts, hf_counts, layer_pattern
# (the modules, not their configs: a module-level config here would be read as
# one more config of the tests by tools/prepare_models.py and bench/outputs.py)
import test_hf_deepseek as deepseek
import test_hf_gemma as gemma
import test_hf_gpt_oss as gpt_oss
import test_hf_import as dense
import test_hf_llama4 as llama4

pytest.importorskip("transformers")


def test_the_patterns_of_published_configs_by_hand():
    # DeepSeek-V3: 3 dense layers (first_k_dense_replace), then 58 alike MoE layers
    assert layer_pattern(deepseek.DEEPSEEK_V3) == (3, 1)
    # Gemma 3: five sliding-window layers, then one global one (sliding_window_pattern 6)
    assert layer_pattern(gemma.GEMMA3_1B) == (0, 6)
    # Qwen2.5 with a window from layer 20 of 24 on (max_window_layers): no shorter repeat
    assert layer_pattern(dense.QWEN25_WINDOWED) == (0, 24)


@pytest.mark.slow
@pytest.mark.parametrize("config", [deepseek.DEEPSEEK_V2_LITE, gpt_oss.ORACLE],
                         ids=["DeepSeek-V2-Lite (1 dense layer first)", "gpt-oss-20b (every 2)"])
def test_carried_to_the_depth_is_the_model_built_at_its_depth(config):
    """DeepSeek-V2-Lite: 27 layers read from 2, 3 and 4; gpt-oss-20b: sliding
    and full attention alternate, 24 layers read from 2, 4 and 6."""
    first, period = layer_pattern(config)
    assert first + 3 * period <= config["num_hidden_layers"] // 2  # carried, not built
    assert hf_counts(config, 32) == direct_hf_counts(config, 32)


@pytest.mark.slow
def test_a_misread_pattern_fails(monkeypatch):
    """Llama 4 Maverick puts its experts in every second layer: read as if
    every layer were alike, the layers do not grow by one amount, and the
    count refuses to carry them."""
    config = at_layers(llama4.MAVERICK, 8)
    monkeypatch.setattr(hf_oracle, "layer_pattern", lambda config: (0, 1))
    with pytest.raises(AssertionError, match="do not repeat every 1"):
        hf_counts(config, 32)


@pytest.mark.parametrize("config", [dense.LLAMA32_1B, deepseek.DEEPSEEK_V3, gemma.GEMMA3_1B,
                                    llama4.MAVERICK],
                         ids=["Llama-3.2-1B", "DeepSeek-V3", "Gemma-3-1B", "Llama-4-Maverick"])
def test_the_oracles_figures_are_those_the_summary_prints(config):
    """symflops's side of the comparison (hf_oracle.symflops_counts) reads
    the parameters and the training FLOPs off the engine's counts without
    building the whole summary; here they are held to the summary's own
    figures, the ones ``symflops derive`` prints (the parameters' total, the
    training FLOPs per token times the tokens), at two sequence lengths."""
    import json

    import sympy

    from symflops.count.cost import costs
    from symflops.count.evaluate import number
    from symflops.count.summary import model_part
    from symflops.derive.backward import derive
    from symflops.hf.importer import import_data
    from symflops.planner.model import imported_layer

    text = json.dumps(dict(config), indent=1)
    imported = import_data(json.loads(text), "config.json", text, "full-square", "model")
    layer = imported_layer(imported)
    d = derive(layer)
    model = model_part(d, costs(d, choice="minimum"))
    for seq in (32, 4096):
        at = {k: sympy.Integer(v) for k, v in {**imported.dims, "B": 1, "S": seq}.items()}
        printed = (number(model.parameters.total, at),
                   number(model.per_token.flops.total * layer.tokens, at))
        assert hf_oracle.symflops_counts(config, seq) == printed

"""The import-hf command and the --hf-config options of plan and render, from
the command line as a user runs them."""

from __future__ import annotations

import json
import re

from test_hf_import import LLAMA32_1B, MIXTRAL_8X7B
import forked


def cli(*args, cwd=None):
    return forked.run(*args, cwd=cwd)


def config(tmp_path, data=LLAMA32_1B, folder="Llama-3.2-1B"):
    (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / folder / "config.json"
    path.write_text(json.dumps(data, indent=2))
    return path


def test_import_writes_a_declaration_that_derive_and_eval_read(tmp_path):
    path = config(tmp_path)
    out = tmp_path / "llama.yaml"
    result = cli("import-hf", str(path), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "configuration 'Llama-3.2-1B'" in result.stdout
    ev = cli("eval", str(out), "--example", "Llama-3.2-1B", "--json")
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout)["params"] == 1_235_814_400      # as in test_hf_import, by hand
    # the text on standard output is the same declaration
    assert cli("import-hf", str(path)).stdout == out.read_text()


def test_import_refuses_a_directory_as_output_and_leaves_nothing(tmp_path):
    path = config(tmp_path)
    result = cli("import-hf", str(path), "-o", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Llama-3.2-1B"]


def test_a_bad_config_is_one_line_exit_2_and_no_file(tmp_path):
    path = config(tmp_path, {**LLAMA32_1B, "mystery_key": 3})
    out = tmp_path / "x.yaml"
    result = cli("import-hf", str(path), "-o", str(out))
    first = result.stderr.splitlines()[0]
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if "mystery_key" in text)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert first.startswith(f"symflops: {path}:{line}:3: error: key 'mystery_key' is not one "
                            "symflops reads")
    assert first.count(str(path)) == 1 and not out.exists()


def test_plan_names_its_declaration_and_shows_it_on_request(tmp_path):
    path = config(tmp_path, MIXTRAL_8X7B, "Mixtral-8x7B-v0.1")
    result = cli("plan", "--hf-config", str(path), "--seq", "4096")
    assert result.returncode == 0, result.stderr
    assert f"declaration: written from {path} by symflops import-hf" in result.stdout
    assert f"symflops import-hf {path} -o Mixtral-8x7B-v0.1.yaml" in result.stdout
    shown = cli("plan", "--hf-config", str(path), "--seq", "4096", "--show-declaration")
    assert shown.stdout.endswith(cli("import-hf", str(path)).stdout)
    data = json.loads(cli("plan", "--hf-config", str(path), "--seq", "4096", "--json",
                          "--show-declaration", "--attention", "full-square").stdout)
    assert data["declaration"]["attention"] == "full-square"
    assert data["declaration"]["text"] == cli("import-hf", str(path), "--attention",
                                              "full-square").stdout
    # full square: 6 products of 2 L N E S^2 / S per token more than causal's S(S+1)/2 pairs
    exact = json.loads(cli("plan", "--hf-config", str(path), "--seq", "4096", "--json").stdout)
    L, N, E, S = 32, 32, 128, 4096
    assert data["flops"]["attention_per_token"] - exact["flops"]["attention_per_token"] == \
        6 * 2 * L * N * E * (S * S - S * (S + 1) // 2) // S


def test_options_for_hf_configs_only_are_refused_elsewhere():
    for args in (["plan", "--params", "7e9", "--attention", "full-square"],
                 ["plan", "--params", "7e9", "--show-declaration"],
                 ["render", "derivations/ffn.yaml", "--attention", "full-square"],
                 ["render"]):
        result = cli(*args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, args


def test_render_a_config_s_sheet(tmp_path):
    path = config(tmp_path)
    result = cli("render", "--hf-config", str(path), "--format", "md")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# Llama decoder (from Llama-3.2-1B/config.json)")
    assert "Llama-3.2-1B" in result.stdout        # the numbers table at the config's values


def test_a_plan_longer_than_a_learned_position_table_is_refused(tmp_path):
    """GPT-2 small has 1,024 learned positions (n_positions): a plan of 2,048-token
    sequences, or a decoding context of 2,048, is not a run the model can do."""
    from test_hf_import import GPT2_SMALL

    path = config(tmp_path, GPT2_SMALL, "gpt2")
    for args in (["--seq", "2048"], ["--seq", "1024", "--context", "2048", "--decode-batch", "1"]):
        result = cli("plan", "--hf-config", str(path), "--tokens", "1e9", *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert "longer than the 1,024 positions the model has (n_positions" in result.stderr
    assert cli("plan", "--hf-config", str(path), "--tokens", "1e9", "--seq", "1024").returncode == 0


def test_a_sum_per_copy_is_bracketed_on_the_sheet(tmp_path):
    """Qwen3-MoE's parameters per layer, 2DNE + 2DGE + 3DMF + DM + 2D + 2E, have no
    common factor: the sheet printed 'L x 2DNE + 2DGE + ...', which says L x 2DNE
    only. The split L x (one layer) + the rest must be bracketed."""
    from test_hf_misc import QWEN3_30B_A3B

    path = config(tmp_path, QWEN3_30B_A3B, "Qwen3-30B-A3B")
    result = cli("render", "--hf-config", str(path), "--format", "md")
    assert result.returncode == 0, result.stderr
    # one layer's parameters, term by term as the sheet adds them, then summed
    # by hand: D + DNE + DGE + DGE + DNE + E + E + D + DM + 3 DMF
    #        = 2DNE + 2DGE + 3DMF + DM + 2D + 2E
    assert (r"L \times (D + DNE + DGE + DGE + DNE + E + E + D + DM + DMF + DMF + DMF) = "
            r"2DNEL + 2DGEL + 3DMFL + DML + 2VD + 2DL + 2EL + D$") in result.stdout
    # nowhere 'L x (first term) + ...': a product by L is of a bracket or one term
    assert not re.search(r"L \\times [A-Za-z0-9]+ \+", result.stdout)


def test_the_components_of_two_kinds_of_layer_say_whose_they_are(tmp_path):
    """A model of windowed and full-attention layers had two rows 'attention' (and two
    of each other component) in its sheet's table and figure; each now names its layers."""
    from test_hf_import import QWEN25_WINDOWED

    result = cli("import-hf", str(config(tmp_path, QWEN25_WINDOWED, "qwen")))
    assert '"attention (full-attention layers)": [' in result.stdout
    assert '"attention (sliding-window layers)": [' in result.stdout
    assert '"attention": [' not in result.stdout

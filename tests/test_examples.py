"""Named configurations (``examples:``): the grammar and its errors at the
offending key's line:column, the parameter counts of real models at them
(published figures, and GPT-2 small's counted by hand), the numbers table's
columns, and ``--example`` on eval, render and build."""

from __future__ import annotations

import json
import pathlib
import textwrap
from fractions import Fraction

import pytest

import symflops
from symflops.cli import main
from symflops.core.errors import SymflopsError

ROOT = pathlib.Path(__file__).resolve().parents[1]
DERIVATIONS = sorted((ROOT / "derivations").glob("*.yaml"))

HEAD = """\
dims:
  B: tokens
  D: width
  F: hidden
  H: {description: half the hidden width, equals: F / 2}
tensors:
  X: {shape: [B, D], role: input}
  W: {shape: [D, F], role: param}
ops:
  - Y[b,f] = X[b,d] W[d,f]
"""


def declare(examples: str) -> symflops.core.ir.Layer:
    return symflops.loads(HEAD + textwrap.dedent(examples), "toy.yaml")


def error(examples: str) -> SymflopsError:
    with pytest.raises(SymflopsError) as info:
        declare(examples)
    return info.value


def test_examples_are_read_in_declaration_order():
    layer = declare("""\
        examples:
          tiny: {F: 16, B: 8, D: "2**2"}
          wide: {B: 1, D: 4e3, F: 2}
        """)
    assert [(e.name, e.values) for e in layer.examples] == [
        ("tiny", (("B", 8), ("D", 4), ("F", 16))),
        ("wide", (("B", 1), ("D", 4000), ("F", 2))),
    ]
    assert layer.examples[0].span.line == 12  # the name's key


def test_a_layer_without_examples_has_none():
    assert symflops.loads(HEAD, "toy.yaml").examples == ()


# (the examples block, the line and column of the error, words of its message)
ERRORS = [
    ("examples: {tiny: {B: 8, D: 4}}\n", (11, 12), ["gives no value for F"]),
    ("examples:\n  tiny: {B: 8, D: 4, F: 16, Q: 3}\n", (12, 29), ["'Q'", "not a dimension",
                                                                  "B, D, F"]),
    ("examples:\n  tiny: {B: 8, D: 4, F: 16, H: 8}\n", (12, 29), ["'H'", "defined by a formula",
                                                                  "computed"]),
    ("examples:\n  tiny: {B: 0, D: 4, F: 16}\n", (12, 13), ["B", "positive integer"]),
    ("examples:\n  tiny: {B: -2, D: 4, F: 16}\n", (12, 13), ["positive integer"]),
    ("examples:\n  tiny: {B: 1.5, D: 4, F: 16}\n", (12, 13), ["positive integer", "1.5"]),
    ("examples:\n  tiny: {B: '1/2', D: 4, F: 16}\n", (12, 14), ["positive integer"]),
    ("examples:\n  tiny: {B: true, D: 4, F: 16}\n", (12, 13), ["positive integer"]),
    ("examples:\n  tiny: {B: 8, D: 4, F: 3}\n", (12, 3), ["H = F/2", "not a positive whole"]),
    ("examples: [B, D]\n", (11, 11), ["'examples' must be a mapping"]),
    ("examples:\n  tiny: 4096\n", (12, 9), ["example 'tiny' must be a mapping"]),
    ("examples:\n  '': {B: 8, D: 4, F: 16}\n", (12, 3), ["needs a name"]),
    ("examples:\n  tiny: {B: 8, D: 4, F: 16, B: 2}\n", (12, 29), ["defined twice"]),
]


@pytest.mark.parametrize("block,at,words", ERRORS, ids=[str(k) for k in range(len(ERRORS))])
def test_bad_examples_are_refused_at_the_offending_key(block, at, words):
    exc = error(block)
    assert (exc.span.file, exc.span.line, exc.span.column) == ("toy.yaml", *at), str(exc)
    for word in words:
        assert word in str(exc), str(exc)


def test_the_python_api_takes_examples():
    layer = symflops.declare("mm", dims={"M": "rows", "K": "inner", "N": "cols"},
                             tensors={"A": {"shape": ["M", "K"], "role": "input"},
                                      "W": {"shape": ["K", "N"], "role": "param"}},
                             ops=["C[m,n] = A[m,k] W[k,n]"], examples={"square": {"M": 2, "K": 3,
                                                                              "N": 4}})
    assert [(e.name, e.values) for e in layer.examples] == [("square", (("M", 2), ("K", 3),
                                                                        ("N", 4)))]
    with pytest.raises(SymflopsError, match="gives no value for N"):
        symflops.declare("mm", dims={"M": "", "K": "", "N": ""},
                         tensors={"A": {"shape": ["M", "K"]}, "W": {"shape": ["K", "N"],
                                                                    "role": "param"}},
                         ops=["C[m,n] = A[m,k] W[k,n]"], examples={"x": {"M": 2, "K": 3}})


def test_an_included_blocks_examples_are_not_the_includers(tmp_path):
    """llama includes llama_block, whose examples name the block's dims only."""
    block = symflops.load(ROOT / "derivations" / "llama_block.yaml")
    model = symflops.load(ROOT / "derivations" / "llama.yaml")
    assert {e.name for e in block.examples} & {e.name for e in model.examples} == set()
    assert all(dict(e.values).keys() >= {"L", "V"} for e in model.examples)


@pytest.mark.parametrize("path", DERIVATIONS, ids=[p.stem for p in DERIVATIONS])
def test_every_shipped_declaration_names_an_example_last(path):
    layer = symflops.load(path)
    assert layer.examples, f"{path.name} has no examples"
    text = path.read_text()
    top_keys = [line.split(":")[0] for line in text.splitlines()
                if line and not line[0].isspace() and not line.startswith("#")]
    assert top_keys[-1] == "examples"


def eval_json(capsys, *args: str) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_llama_2_7b_has_its_published_parameter_count(capsys):
    # Touvron et al. 2023 / the Hugging Face checkpoint: 6,738,415,616 parameters.
    numbers = eval_json(capsys, "derivations/llama.yaml", "--example", "Llama-2-7B")
    assert numbers["params"] == 6_738_415_616
    assert numbers["at"] == {"L": 32, "V": 32000, "B": 1, "S": 4096, "D": 4096, "N": 32,
                             "G": 32, "E": 128, "F": 11008}


def test_other_models_have_their_published_parameter_counts(capsys):
    # Meta's and Mistral's checkpoints: Llama-3-8B 8,030,261,248; Llama-3.2-1B (tied)
    # 1,235,814,400; Mixtral-8x7B 46,702,792,704.
    for path, name, params in [("llama", "Llama-3-8B", 8_030_261_248),
                               ("llama_tied", "Llama-3.2-1B", 1_235_814_400),
                               ("moe", "Mixtral-8x7B", 46_702_792_704)]:
        assert eval_json(capsys, f"derivations/{path}.yaml", "--example", name)["params"] == params


def test_gpt2_small_counted_by_hand(capsys):
    """transformer.yaml ties the unembedding to W_E and has learned positions
    W_P of S rows.  GPT-2 small, by hand: embeddings 50257*768 + 1024*768; a
    block: two LayerNorms 2*2*768, q, k, v and o with biases 4*(768*768 + 768),
    the MLP 768*3072 + 3072 + 3072*768 + 768; twelve blocks and a final
    LayerNorm 2*768.  That is the 124,439,808 of the Hugging Face checkpoint."""
    D, F, V, S, L = 768, 3072, 50257, 1024, 12
    block = 2 * 2 * D + 4 * (D * D + D) + (D * F + F) + (F * D + D)
    expected = V * D + S * D + L * block + 2 * D
    assert expected == 124_439_808
    numbers = eval_json(capsys, "derivations/transformer.yaml", "--example", "GPT-2 small (124M)")
    assert numbers["params"] == expected


def test_eval_with_an_example_has_the_shape_of_eval_with_values(capsys):
    by_name = eval_json(capsys, "derivations/ffn.yaml", "--example", "GPT-2 small MLP")
    by_values = eval_json(capsys, "derivations/ffn.yaml", "B=1024", "D=768", "F=3072")
    assert by_name == by_values
    # ffn by hand (README): training 12 B D F FLOPs
    assert by_name["flops"]["total"] == 12 * 1024 * 768 * 3072


def test_unknown_example_is_exit_2_listing_the_names(capsys, tmp_path):
    assert main(["eval", "derivations/gqa.yaml", "--example", "Llama-9"]) == 2
    err = capsys.readouterr().err
    assert "no example 'Llama-9'" in err and "Llama-2-7B, Llama-3-8B" in err
    assert main(["render", "derivations/gqa.yaml", "--example", "Llama-9"]) == 2
    assert "Llama-2-7B, Llama-3-8B" in capsys.readouterr().err
    src = tmp_path / "src"
    src.mkdir()
    (src / "gqa.yaml").write_text((ROOT / "derivations" / "gqa.yaml").read_text())
    assert main(["build", "--src", str(src), "--out", str(tmp_path / "b"), "--no-pdf",
                 "--example", "Llama-9"]) == 2
    assert "Llama-2-7B, Llama-3-8B" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_eval_refuses_an_example_and_values_together(capsys):
    assert main(["eval", "derivations/ffn.yaml", "B=1", "--example", "GPT-2 small MLP"]) == 2
    assert "either --example NAME or" in capsys.readouterr().err


def test_eval_without_values_still_asks_for_them(capsys):
    assert main(["eval", "derivations/ffn.yaml"]) == 2
    assert "no value for dimension(s) B, D, F" in capsys.readouterr().err


def cells(text: str, label: str) -> list[str]:
    """The cells of the numbers table's row ``label`` ("": the head, the names)."""
    start = f"| {label} |" if label else "| | "
    row = next(line for line in text.splitlines() if line.startswith(start))
    return [c.strip() for c in row.strip("|").split("|")][1:]


def test_the_record_holds_exact_numbers_and_memory_in_gb_and_gib():
    from symflops.count.cost import costs
    from symflops.count.explain import explain

    d = symflops.derive(symflops.load(ROOT / "derivations" / "ffn.yaml"))
    (col,) = explain(d, costs(d)).examples
    B, D, F = 1024, 768, 3072
    assert col.name == "GPT-2 small MLP" and col.config == (("B", B), ("D", D), ("F", F))
    assert (col.forward, col.backward, col.training) == (4 * B * D * F, 8 * B * D * F,
                                                          12 * B * D * F)
    assert col.params == 2 * D * F and col.activations == B * (D + F)
    assert isinstance(col.training_bytes, int)
    assert col.training_gb == Fraction(col.training_bytes, 10**9)
    assert col.training_gib == Fraction(col.training_bytes, 2**30)
    assert col.activation_gib * 2**30 == col.activation_bytes
    assert col.fixed_gb * 10**9 == col.fixed_bytes


def test_an_example_name_latex_cannot_set_is_refused_for_the_tex_sheet_only(tmp_path, capsys):
    path = tmp_path / "toy.yaml"
    path.write_text(HEAD + "examples:\n  注意: {B: 8, D: 4, F: 16}\n")
    assert main(["render", str(path), "--format", "tex"]) == 2
    err = capsys.readouterr().err
    assert "U+6CE8" in err and "example" in err and "toy.yaml:12:" in err
    assert main(["render", str(path), "--format", "md", "-o", str(tmp_path / "toy.md")]) == 0

"""Sheets that teach (issue 27): the regressions a lecturer found on the
shipped sheets, each checked at the mechanism that produced it.

Expected values are written by hand here (the arithmetic in comments) or
come from the declaration's own dims; none is read back from the code under
test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.derive.patterns import with_patterns

from committed import committed_sheet

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sorted(p.stem for p in (ROOT / "derivations").glob("*.yaml"))


def derived(name: str):
    return with_patterns(symflops.derive(symflops.load(str(ROOT / "derivations" / f"{name}.yaml"))))




# -- item 4: a matrix form's note never lands inside a sum ---------------------------------

def test_a_sum_of_flattened_products_carries_its_note_once_after_the_sum() -> None:
    text = committed_sheet("llama")
    # dYn = dH W_up^T + dU W_gate^T, both with (b, s) flattened: the note once, at the end
    assert (r"dH\, W_{\text{up}}^\top + dU\, W_{\text{gate}}^\top \quad (b, s) "
            r"\text{ flattened}$") in text
    assert r"\text{ flattened} +" not in text


@pytest.mark.parametrize("fmt", ["md", "tex"])
@pytest.mark.parametrize("name", SHEETS)
def test_no_shipped_sheet_has_a_note_inside_a_sum(name: str, fmt: str) -> None:
    text = committed_sheet(name, fmt)
    assert not re.search(r"\\text\{ flattened\}\s*[+-]", text)
    assert not re.search(r"\\text\{per \} \S+\s*[+-] ", text)


def body(text: str, fmt: str = "md") -> str:
    """The main body: before the appendix."""
    mark = "## Appendix" if fmt == "md" else r"\appendix"
    return text.split(mark, 1)[0]


# -- item 2: what a row grows with, in words ------------------------------------------------

@pytest.mark.parametrize("name", SHEETS)
def test_no_row_scales_with_a_batch_of_letters(name: str) -> None:
    # the old sheets wrote "batch (S)" for the sequence length, "batch (L, B, S)"
    assert "batch ($" not in committed_sheet(name) and "batch (B" not in committed_sheet(name)


def test_rows_grow_in_words() -> None:
    llama = committed_sheet("llama")
    # P keeps B G R S S per layer: quadratic in S, linear in L and B
    assert ("linearly with the layers $L$ and the sequences in the micro-batch $B$, "
            "quadratically with the sequence length $S$") in llama
    conv = committed_sheet("conv2d_strided")
    assert "linearly with the images in the batch $B$, the output rows $I$ and" in conv


# -- item 3: training minus 6N named term by term ------------------------------------------

@pytest.mark.parametrize("name", SHEETS)
def test_no_pasted_list_of_causes(name: str) -> None:
    assert "routing, padding slots of experts, or weights that get no gradient" not in committed_sheet(name)


def test_each_departure_from_6n_is_named_by_its_cause() -> None:
    lora = committed_sheet("lora")
    # lora: -2IO per token, from Y, only because W0 is frozen; the sheet prints the
    # declared name W0 as \mathit{W0} everywhere (tables, rules, graph), so here too
    assert ("- $- 2IO$ per token from $Y$ (frozen base and adapter up-projection): "
            r"$\mathit{W0}$ is frozen") in lora
    llama = committed_sheet("llama")
    assert ("$+ 3LNE(S + 1)$ per token from $A$ (attention scores and mixing)" in llama
            or "$+ 6LNE(S + 1)$ per token from $A$ and $O$" in llama)
    assert "no weight, so 6N counts nothing for them" in llama


# -- items 5 and 6: the MoE's parameter counts and buckets; the whole model, not "the layer" --

def test_moe_names_active_and_dense_parameters_and_the_booked_product() -> None:
    moe = committed_sheet("moe")
    assert "dense parameters are read by one token's products (the N of 6N)" in moe
    assert "parameters that are operands of matrix products (an MoE's every expert" in moe
    assert "booked as elementwise work; counted with the products, backward = $2$ × forward" in moe


@pytest.mark.parametrize("name", ["llama", "moe", "transformer", "albert", "llama_tied"])
def test_a_whole_model_is_not_called_the_layer(name: str) -> None:
    # "the layer" as a phrase of its own, anywhere on the sheet (the memory table's "given
    # to the layer", the appendix's "bytes the layer saves" were both said of the model);
    # not "the layers $L$" (what a row grows with) nor "each layer"
    for fmt in ("md", "tex"):
        text = committed_sheet(name, fmt)
        found = re.search(r".{0,60}\bthe layer\b.{0,40}", text, re.I)
        assert found is None, (fmt, found and found.group(0))
    assert "The whole model has" in body(committed_sheet(name))


# -- item 7: a frozen weight is drawn as frozen ---------------------------------------------

def test_the_frozen_weight_is_frozen_in_the_graph() -> None:
    from symflops.sheets.graph import computation_graph
    from symflops.sheets.graphplot import _page, graph_pages
    from symflops.sheets.plots import _COLOURS, _SAVED

    d = derived("lora")
    g = computation_graph(d, costs(d))
    kinds = {n.name: n.kind for n in g.nodes}
    assert kinds["W0"] == "frozen" and kinds["A_lo"] == "param"
    assert "class t_W0 frozen" in committed_sheet("lora")  # Mermaid
    fig = _page(g, graph_pages(g)[0], {}, _COLOURS, _SAVED)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "frozen (no gradient)" in labels


# -- item 8: an index tensor's bytes; item 9: the other policy ------------------------------

def test_token_ids_are_counted_at_int32_in_llama() -> None:
    llama = committed_sheet("llama")
    assert "| Index tensors $\\mathit{tok}$ and $y$ | $2BS$ | 4 (int32) | $8BS$ |" in llama


def test_the_card_gives_the_16_byte_mixed_precision_total() -> None:
    ffn = committed_sheet("ffn")
    # mixed-adam: 2 + 2 + 4 + 4 + 4 = 16 bytes per parameter, 16 x 2DF = 32DF
    assert "Under mixed-adam the fixed part is $16 \\times 2DF = 32DF$ bytes" in ffn


# -- item 10: every rule in the body, in index and matrix form ------------------------------

def test_the_rules_are_in_the_body_in_both_forms() -> None:
    for fmt in ("md", "tex"):
        text = body(committed_sheet("ffn", fmt), fmt)
        for rule in (r"(dW_{\text{out}})_{fe} = \sum_{b} H_{bf}\, dY_{be}",
                     r"dW_{\text{out}} = H^\top\, dY", r"dX_{bd} = \sum_{f} dH_{bf}\, (W_{\text{in}})_{df}",
                     r"dX = dH\, W_{\text{in}}^\top"):
            assert rule in text, (fmt, rule)
        assert r"\text{---}" not in text.split("Backward pass", 1)[1].split("Memory", 1)[0]


# -- item 12: the card; item 14: the worked example; item 18: no tool messages -------------

def test_the_card_states_the_costs_and_what_training_keeps() -> None:
    card = committed_sheet("ffn").split("## Setup")[0]
    # a card line is "label: $math$; note" (as "Inference, per token (FLOPs): $4DF$; the
    # forward pass only")
    assert r"$12BDF = 6 \cdot N_{\text{param}} \cdot B$; the 6ND rule, exactly" in card
    assert "Inference runs the forward pass only and keeps no activations" in card
    assert "grows linearly with the tokens in the batch $B$" in card


def test_the_worked_example_walks_the_numbers() -> None:
    ffn = committed_sheet("ffn")
    # GPT-2 small MLP: each of the 6 products 2 x 1,024 x 768 x 3,072 = 4,831,838,208;
    # 6 x that = 28,991,029,248 = 6 x N (2 x 768 x 3,072 = 4,718,592) x 1,024 tokens
    assert (r"2 \times 1{,}024 \times 768 \times 3{,}072 = 4{,}831{,}838{,}208") in ffn
    assert (r"6 \times 4{,}831{,}838{,}208 = 28{,}991{,}029{,}248 = 6 \times 4{,}718{,}592 "
            r"\times 1{,}024") in ffn


@pytest.mark.parametrize("name", SHEETS)
def test_no_tool_message_on_a_sheet(name: str) -> None:
    text = committed_sheet(name)
    assert "declare components:" not in text and "gives no tokens: count" not in text


# -- item 16: layout details -----------------------------------------------------------------

@pytest.mark.parametrize("name", SHEETS)
def test_sentences_are_spaced(name: str) -> None:
    tex = committed_sheet(name, "tex")
    prose = re.sub(r"\$[^$]*\$|\\texttt\{[^}]*\}", "", tex)
    assert not re.search(r"[a-z)]\.(The|Dims|Computed|Op) ", prose)  # "width.The layer has"


def test_factored_forms_where_the_engine_factors() -> None:
    conv = committed_sheet("conv2d_strided")
    # the input X: B x C x (2I + U - 2) x (2J + V - 2) elements, 2 bytes each
    assert "2BC(2I + U - 2)(2J + V - 2)" in conv


def test_backward_rows_are_named_by_component() -> None:
    llama = committed_sheet("llama")
    assert r"| MLP | $dW_{\text{down}}$ ($\times L$) |" in llama
    assert "**Op 2 (frozen base and adapter up-projection)" in committed_sheet("lora")


# -- item 17: one symbol, one meaning -------------------------------------------------------

@pytest.mark.parametrize("name", ["llama", "llama_tied", "moe"])
def test_a_tensor_that_prints_as_a_dim_is_primed(name: str) -> None:
    text = committed_sheet(name)
    assert "$V' = \\mathit{Xn}\\, W_{\\text{v}}" in text or "V'_{" in text
    assert not re.search(r"\$V_\{b[a-z]*\} = ", text)  # values never print as the vocabulary V


# -- items 11 and 13: why, per op; attention, fused ------------------------------------------

def test_the_why_sentences_are_derived_per_op() -> None:
    ffn = committed_sheet("ffn")
    assert ("$dW_{\\text{in}}$ has $W_{\\text{in}}$'s shape $[D, F]$; $X$ is $[B, D]$ and $dH$ is "
            "$[B, F]$: the product with that shape sums over $b$, $X^\\top\\, dH$.") in ffn
    assert "recomputing it instead runs the op that writes it, $H$, again: $2BDF$ FLOPs" in ffn
    lora = committed_sheet("lora")
    assert "It reads $U$, so $U$ is kept" in lora


def test_attention_states_the_correction_and_the_fused_choice() -> None:
    text = committed_sheet("attention_causal")
    # Markdown escapes the policy's underscore
    assert r"Fused attention (a FlashAttention-style kernel, recompute policy fused\_attention)" in text
    llama = committed_sheet("llama")
    # per token: exact 6LNE(S + 1), full square 12LNES; the ratio tends to 1/2
    assert "cost $6LNE(S + 1)$ FLOPs per token" in llama and "$12LSNE$" in llama
    assert "the exact count tends to 1/2 of it as S grows, about half" in llama


# -- item 16: the graph's labels are readable on the page ------------------------------------

def _font_sizes_per_page(pdf: bytes) -> list[list[float]]:
    """The text sizes (``Tf`` operands) in each page's content stream, read with zlib."""
    import zlib

    sizes = []
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", pdf, re.S):
        try:
            data = zlib.decompress(m.group(1))
        except zlib.error:
            continue
        found = [float(x) for x in re.findall(rb"/F\d+ ([\d.]+) Tf", data)]
        if found:
            sizes.append(found)
    return sizes


@pytest.mark.parametrize("name", ["ffn", "lora", "llama", "moe", "transformer", "attention_mla"])
def test_graph_labels_are_at_least_8_pt_on_the_sheet(name: str) -> None:
    """Each page of the graph's PDF, at the scale the sheet includes it at,
    sets its text at 8 pt or more (llama's was about 5 pt on one page)."""
    from symflops.sheets.graph import computation_graph
    from symflops.sheets.plots import graph_figure

    d = derived(name)
    pdf = graph_figure(computation_graph(d, costs(d)))
    tex = committed_sheet(name, "tex")
    scales = [float(x) for x in re.findall(r"\\includegraphics\[page=\d+,scale=([\d.]+)", tex)]
    pages = _font_sizes_per_page(pdf)
    assert scales and len(pages) == len(scales), (len(pages), len(scales))
    # the legend is set at 8 / scale pt, which the PDF prints to 10 decimals
    # (8 / 0.971 = 8.2389289392...): 8.2389289392 x 0.971 = 7.99999999996 is 8 pt on the
    # page, so allow 1e-6 pt of that rounding, not more (7.99 pt still fails)
    for sizes, s in zip(pages, scales):
        assert min(sizes) * s >= 8.0 - 1e-6, (name, min(sizes), s)


def test_a_layer_without_parameters_is_not_written_as_6n() -> None:
    """Mamba-2's scan reads no parameter: 6N is 0, so the card and the worked
    example say so instead of "6 · N_param · BT + ..." and "6 × 0 × 2,048 + ...".
    By hand: its training is 8BTHPN, at the example (B = 1, T = 2048, H = 64,
    P = 64, N = 128 in its first example) all of it beyond 6N."""
    text = committed_sheet("mamba2_scan")
    card = text[:text.index("## Setup")]
    assert r"N_{\text{param}}" not in card
    assert "- Training (FLOPs): $8BTHPN$; no parameter is read by a product, so 6N is 0" in card
    assert r"6 \times 0 \times" not in text
    assert "(no parameter is read by a product, so 6ND is 0: every FLOP is beyond 6N)." in text


def test_a_product_without_a_summed_letter_names_its_activations() -> None:
    """Mamba-2's scan drives its state with the outer product U = Bm X (no
    summed letter, 0 matmul FLOPs forward); its backward contracts dU with X
    and with Bm, 2 BTHPN each, so 4HPN per token beyond 6N, from activations
    Bm and X.  The card listed them as "activations ()"."""
    text = committed_sheet("mamba2_scan")
    assert ("- $+ 4HPN$ per token from $U$ (input to state): they multiply activations "
            r"($\mathit{Bm}$ and $X$), no weight") in text
    for md in sorted((ROOT / "build").glob("*.md")):
        assert "activations ()" not in md.read_text(), md.name


def test_a_product_taken_with_a_minus_sign_is_written_without_a_one() -> None:
    """The loop's rule dW = -G_N S_prev^T (the new values subtract W S) has the
    coefficient -1; its matrix form printed it as "-1\\, G_N S_prev^T"."""
    from symflops.core.records import MatrixProduct
    from symflops.sheets.printing import PolyPrinter, matrix_product

    minus = MatrixProduct("dW", sympy.Integer(-1), (("G", False), ("S", True)))
    assert matrix_product(minus, PolyPrinter(())) == r"-G\, S^\top"
    assert r"dW = -G_{\text{N}}\, S_{\text{prev}}^\top" in committed_sheet("deltanet_chunk")
    for path in sorted((ROOT / "build").glob("*.md")) + sorted((ROOT / "build").glob("*.tex")):
        assert not re.search(r"= -1\\, ", path.read_text(encoding="utf-8")), path.name

"""The front table: ``components:`` in a declaration, the per-component
count record, its shares, and the table a sheet shows.

Expected values are hand counts written here: llama_block's SwiGLU MLP has
three D x F weights (3DF parameters), three matrix products of 2BSDF FLOPs
forward and two of the same size per product backward (12BSDF); ffn's two
products split its cost and memory as counted by hand below."""

from __future__ import annotations

import glob
import os

import pytest
import sympy

from symflops.core.errors import SymflopsError
from symflops.count.components import component_table, percent, shares
from symflops.count.cost import costs
from symflops.declaration.reader import load, loads
from symflops.derive.backward import derive

HERE = os.path.dirname(__file__)
DERIVATIONS = os.path.join(HERE, "..", "derivations")
SHIPPED = sorted(glob.glob(os.path.join(DERIVATIONS, "*.yaml")))
B, S, D, F, L, V = sympy.symbols("B S D F L V", positive=True, integer=True)

# ffn.yaml up to its ops, so that a test adds 'components:' and the ops after it
FFN = open(os.path.join(DERIVATIONS, "ffn.yaml")).read().split("ops:\n")[0]
HEAD = FFN.count("\n")  # lines before the 'components:' a test adds


def _table(layer):
    d = derive(layer)
    return component_table(d, costs(d)), costs(d)


def _row(table, name):
    return next(r for r in table.rows if r.name == name)


# ---------------------------------------------------------------- grammar --


def _error(text: str) -> SymflopsError:
    with pytest.raises(SymflopsError) as e:
        loads(text, "c.yaml")
    return e.value


def test_a_name_no_op_writes_is_refused_at_its_position_naming_the_op_outputs():
    err = _error(FFN + "components: {up: [H, Hx]}\nops:\n  - H[b,f] = X[b,d] W_in[d,f]\n"
                       "  - Y[b,e] = H[b,f] W_out[f,e]\n")
    assert (err.span.line, err.span.column) == (HEAD + 1, 22)
    assert "'Hx'" in err.message and "the op outputs are H, Y" in err.hint


def test_an_op_in_two_components_is_refused():
    err = _error(FFN + "components:\n  up: [H]\n  down: [Y, H]\nops:\n"
                       "  - H[b,f] = X[b,d] W_in[d,f]\n  - Y[b,e] = H[b,f] W_out[f,e]\n")
    assert err.span.line == HEAD + 3 and "'H' is in two components" in err.message
    assert f"'up' (line {HEAD + 2})" in err.message


@pytest.mark.parametrize("value, what", [("[]", "non-empty list"), ("H", "non-empty list"),
                                          ("[[H]]", "must be text")])
def test_a_component_is_a_non_empty_list_of_names(value, what):
    err = _error(FFN + f"components: {{up: {value}}}\nops:\n  - H[b,f] = X[b,d] W_in[d,f]\n"
                       "  - Y[b,e] = H[b,f] W_out[f,e]\n")
    assert what in err.message


def test_an_op_named_twice_in_one_component_is_refused():
    err = _error(FFN + "components: {up: [H, H]}\nops:\n  - H[b,f] = X[b,d] W_in[d,f]\n")
    assert "component 'up' names 'H' twice" in err.message and err.span.column == 22


def test_components_from_python():
    from symflops.declaration.reader import declare

    kw = dict(dims={"B": "tokens", "D": "width", "F": "hidden"},
              tensors={"X": {"shape": ["B", "D"], "role": "input"},
                       "W_in": {"shape": ["D", "F"], "role": "param"},
                       "W_out": {"shape": ["F", "D"], "role": "param"}},
              ops=["H[b,f] = X[b,d] W_in[d,f]", "Y[b,e] = H[b,f] W_out[f,e]"])
    layer = declare("ffn", **kw, components={"up": ["H"], "down": ["Y"]})
    assert [(c.name, c.ops) for c in layer.components] == [("up", ("H",)), ("down", ("Y",))]
    with pytest.raises(SymflopsError) as e:
        declare("ffn", **kw, components={"up": ["H"], "down": ["Y", "H"]})
    assert e.value.message == "op 'H' is in two components: component 'up' and 'down'"
    with pytest.raises(SymflopsError):  # a name, not a list of names
        declare("ffn", **kw, components={"up": "H"})


def test_components_must_be_a_mapping():
    err = _error(FFN + "components: [H]\nops:\n  - H[b,f] = X[b,d] W_in[d,f]\n")
    assert "'components' must be a mapping" in err.message


def _model(tmp_path, block_components: str, model_components: str):
    block = FFN.replace("name: ffn", "name: blk") + block_components + (
        "ops:\n  - H[b,f] = X[b,d] W_in[d,f]\n  - Y[b,e] = H[b,f] W_out[f,e]\n")
    (tmp_path / "blk.yaml").write_text(block)
    (tmp_path / "model.yaml").write_text(
        "dims: {B: tokens, D: width, F: hidden, L: layers}\n"
        "tensors:\n  X0: {shape: [B, D], role: input, requires_grad: false}\n"
        "  W_h: {shape: [D, D], role: param}\n" + model_components +
        "ops:\n  - include: blk.yaml\n    repeat: L\n    tensors: {X: X0, Y: XL}\n"
        "  - Z[b,e] = XL[b,d] W_h[d,e]\n")
    return tmp_path / "model.yaml"


def test_an_included_blocks_components_carry_in_renamed(tmp_path):
    layer = load(_model(tmp_path, "components: {up: [H], down: [Y]}\n", "components: {head: [Z]}\n"))
    assert [(c.name, c.ops) for c in layer.components] == [("up", ("H",)), ("down", ("XL",)),
                                                           ("head", ("Z",))]
    table, _ = _table(layer)
    assert [(r.name, r.repeat) for r in table.rows] == [("up", L), ("down", L), ("head", 1)]


def test_a_name_shared_by_a_block_and_its_includer_gives_a_row_per_repeat(tmp_path):
    table, _ = _table(load(_model(tmp_path, "components: {up: [H], down: [Y]}\n",
                                  "components: {up: [Z]}\n")))
    assert [(r.name, r.repeat, r.ops) for r in table.rows] == [
        ("up", L, ("H",)), ("down", L, ("XL",)), ("up", 1, ("Z",))]


def test_an_op_of_an_included_component_cannot_join_another(tmp_path):
    with pytest.raises(SymflopsError) as e:
        load(_model(tmp_path, "components: {down: [Y]}\n", "components: {head: [Z, XL]}\n"))
    assert "'XL' is in two components: component 'down' of an included block" in e.value.message


def test_a_component_cannot_mix_a_repeated_blocks_ops_with_others(tmp_path):
    with pytest.raises(SymflopsError) as e:
        load(_model(tmp_path, "", "components: {tail: [XL, Z]}\n"))
    assert "mixes ops" in e.value.message and "XL (L copies)" in e.value.message
    assert e.value.span.line == 5


# ------------------------------------------------------------------ counts --


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_rows_sum_to_the_layers_totals_and_hold_every_op_once(path):
    layer = load(path)
    table, c = _table(layer)
    mem = c.memory()
    expect = {"params": c.params, "forward": c.flops_forward, "backward": c.flops_backward,
              "elementwise_forward": c.elementwise_forward,
              "elementwise_backward": c.elementwise_backward,
              "saved_elements": c.activations, "saved_bytes": mem["activation_bytes"]}
    for name, total in expect.items():
        rows = sum((getattr(r.totals, name) for r in table.rows), sympy.Integer(0))
        assert sympy.expand(rows - total) == 0, name
        # each row's totals are its repeat times one copy, plus what an end copy does less
        again = sum((r.repeat * getattr(r, name) + getattr(r.edge(), name) for r in table.rows),
                    sympy.Integer(0))
        assert sympy.expand(again - total) == 0, name
    ops = [op for r in table.rows for op in r.ops]
    assert sorted(ops) == sorted(op.output for op in layer.ops)
    saved = [t for r in table.rows for t in r.saved_tensors]
    assert sorted(saved) == sorted(s.name for s in c.saved)
    assert sorted(p for r in table.rows for p in r.param_tensors) == sorted(
        t.name for t in layer.params)


def test_llama_block_mlp_row_by_hand():
    table, _ = _table(load(os.path.join(DERIVATIONS, "llama_block.yaml")))
    mlp = _row(table, "MLP")
    # W_gate, W_up (D x F) and W_down (F x D)
    assert sympy.expand(mlp.params - 3 * D * F) == 0
    # U, H and the down-projection: 2BSDF each (the gating and the residual are elementwise)
    assert sympy.expand(mlp.forward - 6 * B * S * D * F) == 0
    # each product: a weight gradient and an input gradient of 2BSDF each
    assert sympy.expand(mlp.backward - 12 * B * S * D * F) == 0
    assert mlp.repeat == 1 and mlp.ops == ("U", "H", "M", "Y")


def test_llama_rows_are_per_layer_with_the_repeat():
    table, _ = _table(load(os.path.join(DERIVATIONS, "llama.yaml")))
    assert [(r.name, r.repeat) for r in table.rows] == [
        ("embedding", 1), ("norms", L), ("attention projections", L),
        ("attention scores and mixing", L), ("MLP", L), ("final norm", 1),
        ("output head", 1), ("loss", 1)]
    mlp = _row(table, "MLP")
    assert mlp.ops == ("U", "H", "M", "XL")  # the block's Y, bound to XL here
    assert sympy.expand(mlp.totals.params - 3 * D * F * L) == 0
    # a norm's normalised tensor is written by the norm's statement: it goes with it
    assert _row(table, "norms").ops == ("Xn_hat", "Xn", "Yn_hat", "Yn")


def test_unlisted_ops_get_a_row_each_named_by_their_output():
    table, _ = _table(load(os.path.join(DERIVATIONS, "ffn.yaml")))
    assert [(r.name, r.kind) for r in table.rows] == [("H", "op"), ("Y", "op")]


def test_a_tied_table_counts_in_its_first_row_and_says_who_else_reads_it():
    table, _ = _table(load(os.path.join(DERIVATIONS, "llama_tied.yaml")))
    emb, head = _row(table, "embedding"), _row(table, "output head")
    assert emb.param_tensors == ("W_E",) and head.param_tensors == ()
    assert sympy.expand(emb.params - V * D) == 0 and head.params == 0
    assert [(s.tensor, s.also_read_by) for s in emb.shared] == [("W_E", ("output head",))]


def test_the_first_copy_that_needs_no_input_gradient_shows_as_an_edge(tmp_path):
    table, _ = _table(load(_model(tmp_path, "components: {up: [H], down: [Y]}\n", "")))
    up = _row(table, "up")
    # X0 needs no gradient: the first copy skips dX = dH W_in^T (2BDF FLOPs)
    assert sympy.expand(up.backward - 4 * B * D * F) == 0
    assert sympy.expand(up.edge().backward + 2 * B * D * F) == 0
    assert sympy.expand(up.totals.backward - (4 * L - 2) * B * D * F) == 0


def test_shares_at_a_configuration_by_hand():
    table, _ = _table(load(os.path.join(DERIVATIONS, "ffn.yaml")))
    got = {s.name: s for s in shares(table, {"B": 2, "D": 3, "F": 5})}
    # each product: 2BDF forward, 4BDF backward; DF parameters each
    assert got["H"].training_flops == 6 * 2 * 3 * 5 and got["H"].training_share == sympy.Rational(1, 2)
    assert got["Y"].params_share == sympy.Rational(1, 2)
    # H's weight gradient reads X (B*D = 6 elements), Y's reads H (B*F = 10), 2 bytes each
    assert got["H"].activation_bytes == 12 and got["H"].activation_share == sympy.Rational(3, 8)
    assert got["Y"].activation_share == sympy.Rational(5, 8)
    assert percent(sympy.Rational(3, 8)) == "37.5%" and percent(sympy.Rational(2, 3)) == "66.7%"


def test_shares_substitute_defined_dims():
    table, _ = _table(load(os.path.join(DERIVATIONS, "llama_block.yaml")))
    values = {"B": 1, "S": 8, "D": 16, "N": 4, "G": 2, "E": 4, "F": 32}
    got = shares(table, values)
    assert sum(s.training_share for s in got) == 1 and sum(s.params_share for s in got) == 1
    # attention projections: W_q, W_o are D x N E, W_k, W_v D x G E: 2*16*16 + 2*16*8
    assert next(s for s in got if s.name == "attention projections").params == 768


def test_shares_need_every_dim():
    table, _ = _table(load(os.path.join(DERIVATIONS, "ffn.yaml")))
    with pytest.raises(SymflopsError) as e:
        shares(table, {"B": 2, "D": 3})
    assert "no value for F" in e.value.message


# ------------------------------------------------------------------- sheet --


def _front(layer, fmt, values=None, config=None, unit="FLOPs"):
    from symflops.count.summary import whole_model
    from symflops.sheets import printing as P
    from symflops.sheets.environment import environment
    from symflops.sheets.escape import ESCAPES
    from symflops.sheets.front import front_context
    from symflops.sheets.notation import Math, Substituted

    d = derive(layer)
    c = costs(d, unit)
    poly = Substituted(P.PolyPrinter(tuple(x.name for x in layer.dims)),
                       tuple(layer.substitutions.items()))
    m = Math(poly, frozenset(t.name for t in layer.tensors))
    model = whole_model(d, c) if layer.tokens is not None or layer.blocks else None
    from symflops.sheets.equations import Named, Printer
    n_param = Named.of(r"N_{\text{param}}", c.params)
    ctx = front_context(d, c, model, poly, m, ESCAPES[fmt], Printer(poly), n_param, set(),
                        values, config)
    return ctx, environment(fmt).get_template(f"front.{fmt}.j2").render(front=ctx)


LLAMA_BLOCK_AT = {"B": 1, "S": 8, "D": 16, "N": 4, "G": 2, "E": 4, "F": 32}


def test_the_md_table_shows_the_mlp_row_counted_by_hand():
    _, md = _front(load(os.path.join(DERIVATIONS, "llama_block.yaml")), "md")
    assert "| MLP | $\\times 1$ | $3DF$ | $6BSDF$ | $12BSDF$ |" in md
    header = md.splitlines()[0]
    for unit in ("Parameters (elements", "Forward FLOPs", "Backward FLOPs",
                 "Saved activations (bytes"):
        assert unit in header
    assert "Share of" not in md  # no configuration: no shares
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len({ln.count(" | ") for ln in lines if not ln.startswith("|---")}) == 1


def test_the_md_table_gives_shares_at_a_named_configuration():
    ctx, md = _front(load(os.path.join(DERIVATIONS, "ffn.yaml")), "md",
                     {"B": 2, "D": 3, "F": 5}, "tiny")
    assert "Share of training FLOPs (%) at tiny" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| $H$"))
    assert row.endswith("| 50.0% | 50.0% | 37.5% |")  # the hand count of the shares test
    assert "Shares at tiny ($B = 2,\\ D = 3,\\ F = 5$)" in md
    _, md = _front(load(os.path.join(DERIVATIONS, "ffn.yaml")), "md",
                   {"B": 2**20, "D": 3, "F": 5}, "big")
    assert "($B = 1{,}048{,}576,\\ D = 3" in md  # exact, as the configuration was given
    assert "| 50.0% | 50.0% | 37.5% |" in md  # B cancels from every share


def test_headlines_split_training_into_6n_and_the_attention_term():
    ctx, _ = _front(load(os.path.join(DERIVATIONS, "llama.yaml")), "md")
    lines = [h["math"] for h in ctx["headlines"]]
    training = next(x for x in lines if r"6 \cdot N_{\text{active}}" in x)
    # causal attention beyond 6N: 6 L B S N E (S + 1) (the whole-model test's hand count)
    assert training.endswith(r"= 6 \cdot N_{\text{active}} \cdot BS + 6LBSNE(S + 1)")
    assert lines[0].startswith(r"N_{\text{param}} = ") and r"= L \times " in lines[0]
    assert any(x.startswith(r"N_{\text{active}} = ") for x in lines)


def test_no_6n_split_without_tokens_or_in_macs():
    ctx, _ = _front(load(os.path.join(DERIVATIONS, "conv2d_strided.yaml")), "md")  # no tokens
    assert not any("6 \\cdot" in h["math"] for h in ctx["headlines"])
    ctx, _ = _front(load(os.path.join(DERIVATIONS, "llama.yaml")), "md", unit="MACs")
    assert not any("6 \\cdot" in h["math"] for h in ctx["headlines"])
    assert "Forward MACs (one copy)" in ctx["header"][3]


def test_a_tied_table_gets_a_footnote():
    ctx, _ = _front(load(os.path.join(DERIVATIONS, "llama_tied.yaml")), "md")
    assert ctx["notes"] == [r"$W_{\text{E}}$ is counted in embedding; the ops of output head "
                            "read it too."]


def test_an_end_copy_that_does_less_gets_a_footnote(tmp_path):
    ctx, _ = _front(load(_model(tmp_path, "components: {up: [H], down: [Y]}\n", "")), "md")
    note = next(n for n in ctx["notes"] if n.startswith("up:"))
    assert "$L$ whole copies by $-2BDF$ backward FLOPs" in note and "the total row counts every copy" in note


@pytest.mark.parametrize("fmt, name, shown", [
    ("md", "a|b $x$ *y*", r"a\|b \$x\$ \*y\*"),
    ("tex", "50% & more_{x}", r"50\% \& more\_\{x\}")])
def test_component_names_are_escaped(fmt, name, shown):
    text = FFN + f"components: {{'{name}': [H]}}\nops:\n  - H[b,f] = X[b,d] W_in[d,f]\n" \
                 "  - Y[b,e] = H[b,f] W_out[f,e]\n"
    _, out = _front(loads(text, "c.yaml"), fmt)
    assert shown in out and name not in out


def test_a_parameter_no_op_reads_gets_a_row_of_its_own():
    layer = loads(FFN + "  W_spare: {shape: [F], role: param}\nops:\n"
                        "  - H[b,f] = X[b,d] W_in[d,f]\n  - Y[b,e] = H[b,f] W_out[f,e]\n", "c.yaml")
    table, c = _table(layer)
    spare = _row(table, "W_spare")
    assert (spare.kind, spare.params, spare.repeat, spare.ops) == ("parameter", F, 1, ())
    assert sympy.expand(sum(r.totals.params for r in table.rows) - (2 * D * F + F)) == 0


def test_rows_that_miss_a_count_are_a_bug():
    from symflops.count.components import _check

    table, c = _table(load(os.path.join(DERIVATIONS, "ffn.yaml")))
    with pytest.raises(AssertionError, match="do not sum to the layer's totals in params, forward, backward"):
        _check(table.rows[1:], c)
    assert _check(table.rows, c) == table.total

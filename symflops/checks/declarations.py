"""The declarations a claim is about, and the quantities each has under a
convention: which count a name means (``attention``: a causal product over
its pairs or the full square; ``recompute``: the policy of
``flops.executed`` and the activation memory; ``precision``; ``macs``).
Each declaration is derived once per attention convention and counted once
per unit and precision; its quantities are the names of
:mod:`symflops.count.names`, defined dims substituted."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import RECOMPUTE_POLICIES, Layer, substitute
from ..core.records import Derivation
from ..count.attention import attention, full_square
from ..count.cost import costs as count_costs
from ..count.names import Sources, registry, values as name_values
from ..count.precision import POLICIES
from ..count.records import Formula, Summary
from ..count.summary import summary
from ..count.traffic import source as traffic_source
from ..derive.backward import derive

Attention = Literal["exact", "full-square"]


@dataclass(frozen=True)
class Convention:
    """Which count the quantities mean (None: the declaration's own)."""

    attention: Attention | None = None
    recompute: str | None = None
    precision: str | None = None
    macs: bool = False

    @property
    def unit(self) -> str:
        return "MACs" if self.macs else "FLOPs"

    def flags(self) -> str:
        """The command-line options that state this convention ('' for none)."""
        parts = []
        if self.attention:
            parts.append(f"--attention {self.attention}")
        if self.recompute:
            parts.append(f"--recompute {self.recompute}")
        if self.precision:
            parts.append(f"--precision {self.precision}")
        if self.macs:
            parts.append("--macs")
        return " ".join(parts)


class Declaration:
    """One declaration and its quantities under each convention asked for
    (derived once per attention convention, counted once per unit and precision)."""

    def __init__(self, layer: Layer, label: str | None = None):
        self.layer = layer
        self.label = label or layer.name
        self._derived: dict[Any, Derivation] = {}
        self._summaries: dict[Any, tuple[Summary[Formula], Any, Any]] = {}
        self._quantities: dict[tuple[Convention, frozenset[str] | None],
                               dict[str, sympy.Expr]] = {}
        self._variants: list[tuple[str, Declaration]] | None = None

    @property
    def name(self) -> str:
        return self.layer.name

    def refuse(self, convention: Convention, span: Span | None = None) -> None:
        """SymflopsError when the convention does not apply to this declaration."""
        if convention.recompute is not None:
            if convention.recompute not in RECOMPUTE_POLICIES:
                raise SymflopsError(f"unknown recompute policy {convention.recompute!r}", span,
                                    f"use one of {', '.join(RECOMPUTE_POLICIES)}")
            if convention.recompute == "selective" and not self.layer.selective:
                raise SymflopsError(f"{self.name} declares no selective recomputation, so "
                                    "--recompute selective does not apply", span,
                                    "declare recompute: {selective: [A, P]} in it, or use "
                                    "none or full")
        if convention.precision is not None and convention.precision not in POLICIES:
            raise SymflopsError(f"unknown precision policy {convention.precision!r}", span,
                                f"use one of {', '.join(sorted(POLICIES))}")
        if convention.attention == "full-square":
            try:
                self.derivation("full-square")
            except SymflopsError as exc:
                raise SymflopsError(exc.message, span, exc.hint) from None
        elif convention.attention not in (None, "exact"):
            raise SymflopsError(f"unknown attention convention {convention.attention!r}", span,
                                "use exact or full-square")

    def variants(self) -> list[tuple[str, "Declaration"]]:
        """The declaration with one single change each: an input that needs no
        gradient, a parameter frozen, a frozen weight trained, a first input
        given a gradient."""
        if self._variants is None:
            self._variants = []
            for t in self.layer.tensors:
                if t.role == "input" and t.requires_grad:
                    changed = dataclasses.replace(t, requires_grad=False)
                    words = f"{t.name} needs no gradient (requires_grad: false)"
                elif t.role == "param" and t.requires_grad:
                    changed = dataclasses.replace(t, role="frozen", requires_grad=False)
                    words = f"{t.name} is frozen (role: frozen)"
                elif t.role == "frozen":
                    changed = dataclasses.replace(t, role="param", requires_grad=True)
                    words = f"{t.name} is trained (role: param)"
                elif t.role == "input":
                    changed = dataclasses.replace(t, requires_grad=True)
                    words = f"{t.name} needs a gradient (requires_grad: true)"
                else:
                    continue
                tensors = tuple(changed if u.name == t.name else u for u in self.layer.tensors)
                self._variants.append(
                    (words, Declaration(dataclasses.replace(self.layer, tensors=tensors))))
        return self._variants

    def derivation(self, attention_: Attention | None) -> Derivation:
        key = attention_ or "exact"
        if key not in self._derived:
            layer = full_square(self.layer) if key == "full-square" else self.layer
            self._derived[key] = derive(layer)
        return self._derived[key]

    def summary(self, convention: Convention) -> tuple[Summary[Formula], Any, Any]:
        """The summary, the attention products and the costs under ``convention``."""
        key = (convention.attention or "exact", convention.unit, convention.precision)
        if key not in self._summaries:
            d = self.derivation(convention.attention)
            c = count_costs(d, convention.unit, convention.precision)  # type: ignore[arg-type]
            # its named quantities are counted by quantities(), only those asked
            self._summaries[key] = (summary(d, c, quantities=False),
                                    attention(d, c.unit, c.forward_copies, c.backward_copies), c)
        return self._summaries[key]

    def quantities(self, convention: Convention, only: frozenset[str] | None = None
                   ) -> dict[str, sympy.Expr]:
        """Every named quantity under ``convention``, defined dims substituted
        (shared by every Declaration of an equal layer: :data:`_QUANTITIES`);
        with ``only``, those of its names that apply (an explanation tries a
        claim again under many conventions and changes, and needs only the
        names the claim writes)."""
        if (convention, only) not in self._quantities:
            key = (self.layer, convention, only)
            if key in _QUANTITIES:
                _QUANTITIES.move_to_end(key)
                self._quantities[(convention, only)] = _QUANTITIES[key]
                return _QUANTITIES[key]
            s, att, c = self.summary(convention)
            if convention.recompute is not None and \
                    convention.recompute not in s.model.recompute.policies:
                raise SymflopsError(
                    f"{self.layer.name} does not offer the recompute policy "
                    f"{convention.recompute!r} (fused_attention needs an attention core, "
                    "selective a 'selective:' list)", None,
                    f"use one of {', '.join(s.model.recompute.policies)}")
            subs = self.layer.substitutions
            found = name_values(Sources(s, att, convention.recompute,
                                        traffic_source(self.derivation(convention.attention), c)),
                                only)
            self._quantities[(convention, only)] = {
                n: substitute(sympy.expand(v), subs) if subs else v for n, v in found.items()}
            _QUANTITIES[key] = self._quantities[(convention, only)]
            while len(_QUANTITIES) > _QUANTITIES_KEPT:
                _QUANTITIES.popitem(last=False)
        return self._quantities[(convention, only)]


#: The quantities of the last layers counted in this process, by (layer,
#: convention, the names asked: None for all): a pure function of these
#: (derive, costs, summary and the named quantities read nothing else), and a Layer is a frozen record compared
#: by its whole content (dims, tensors, ops, name, source, ...; only the
#: positions of its parts in the text are left out, and the quantities hold
#: none).  ``check`` builds a Declaration per claims file and per variant of
#: an explanation, so one process (a claims file's many requests, a notebook,
#: the test suite) counts an equal layer once.  Read only: callers never
#: change the dict they are given.
_QUANTITIES: OrderedDict[tuple[Layer, Convention, frozenset[str] | None],
                         dict[str, sympy.Expr]] = OrderedDict()
_QUANTITIES_KEPT = 128


def claim_symbols(layer: Layer, s: Summary[Formula]) -> dict[str, sympy.Expr]:
    """Every name a claim about ``layer`` may use (its dims, then the
    quantities of ``s``), mapped to its formula: a dim defined by a formula
    maps to that formula."""
    symbols = dims_of(layer)
    for name, value in s.quantities.items():
        if name in symbols:
            raise _clash(layer, name)
        symbols[name] = value
    return symbols


def _clash(layer: Layer, name: str) -> SymflopsError:
    span = next((d.span for d in layer.dims if d.name == name), None)
    return SymflopsError(f"dimension {name!r} has the name of a derived quantity", span,
                         f"rename the dimension; {name!r} is reserved in claims")


def dims_of(layer: Layer) -> dict[str, sympy.Expr]:
    """Each dim's symbol; a defined dim's formula."""
    subs = layer.substitutions
    reserved = {q.name for q in registry()}
    out = {}
    for d in layer.dims:
        if d.name in reserved:
            raise _clash(layer, d.name)
        out[d.name] = subs.get(d.symbol, d.symbol)
    return out



"""Pointwise functions: each defined once by its SymPy formula.

The derivative of every function is derived by SymPy (``sympy.diff``), never
typed in.  A function's backward rule ``dX = dY * f'(X)`` reads either the
input X or, where the derivative is a function of the output (sigmoid, tanh,
exp), the output Y: that is the convention each entry declares (``saves``),
and for output-reading functions the derivative in terms of Y is derived too
(SymPy inverts ``y = f(x)`` or spots ``f(x)`` inside ``f'(x)``) and checked
numerically against ``f'(x)``.

Cost convention: FLOPs per element are the number of operations in the SymPy
formula (``sympy.count_ops``: each add, multiply, divide, power and each
evaluation of exp, erf, tanh, log or max counts 1; a square root or a
reciprocal square root of the variable counts 1, one operation as kernels
have it, where ``count_ops`` would also count the division in the exponent
``1/2``).  A piecewise function (elu)
counts 1 for choosing its branch plus the operations of every branch, as a
vectorised kernel evaluates both: elu, ``x`` or ``exp(x) - 1``, is 3.  The
same count of the derivative's formula, plus 1 for the multiply by dY, is the
backward cost.  These are model counts of the formula as written, not of any
kernel.

A factor in an einsum may apply a function (:attr:`symflops.core.ir.Factor.fn`, an
:class:`symflops.core.ir.Apply`): ``Apply("gelu")`` applies the function,
``Apply("gelu", "derivative")`` (printed ``gelu'``) its derivative at the input, and
``Apply("sigmoid", "derivative@out")`` (``sigmoid'@out``) the derivative written in
terms of the output.

Domains: a function is defined on every real (``domain="real"``) or on x > 0
only (``"positive"``: log, sqrt, rsqrt, reciprocal).  ``verify`` draws
positive values for a tensor such a function reads directly, and refuses,
naming the op, to evaluate one where its argument is not positive
(:mod:`symflops.checks.numeric`).  ``reciprocal`` is also what a division by
a tensor lowers to (``N[s,f] / Z[s]`` is ``N[s,f] reciprocal(Z[s])``): inside
a product the multiply that takes it in is the divide, so it adds no work of
its own there (:func:`cost`), and it prints as a quotient
(:data:`symflops.core.factors.RECIPROCAL`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Callable, Iterator, Literal, get_args

from ..core.lazy import numpy as np
import sympy

from ..core.factors import RECIPROCAL
from ..core.ir import Apply

X = sympy.Symbol("x", real=True)
Y = sympy.Symbol("y", real=True)

#: Where a function is defined: every real, or x > 0 only.
Domain = Literal["real", "positive"]
DOMAINS: tuple[Domain, ...] = get_args(Domain)


@dataclass(frozen=True)
class Function:
    name: str
    formula: sympy.Expr          # f(x) in the symbol X
    saves: str                   # "input" or "output": what the derivative reads
    latex: str                   # how its name prints, e.g. \operatorname{gelu}
    description: str
    torch_name: str              # PyTorch's own function, in torch or torch.nn.functional
    torch_options: tuple[tuple[str, str], ...] = ()   # its keyword arguments
    domain: Domain = "real"      # where it is defined (see the module doc)

    def defined_at(self, values: np.ndarray) -> np.ndarray:
        """Which of ``values`` lie in the function's domain."""
        return np.isfinite(values) & ((values > 0) if self.domain == "positive" else True)

    def torch(self, torch: Any, x: Any) -> Any:
        """PyTorch's own implementation, the oracle ``verify`` compares with
        (independent of the SymPy formula symflops derives from)."""
        found = getattr(torch, self.torch_name, None) or getattr(torch.nn.functional, self.torch_name)
        return found(x, **dict(self.torch_options))

    @cached_property
    def derivative(self) -> sympy.Expr:
        """f'(x), by SymPy."""
        return sympy.diff(self.formula, X)

    @cached_property
    def derivative_of_output(self) -> sympy.Expr:
        """f'(x) written as g(y) with y = f(x), for output-saving functions.

        Tried in order, cheapest first: spot f(x) inside f'(x); solve
        y = f(x) for one function of x in it (sigmoid: exp(-x) = (1 - y)/y),
        when that equation is linear; solve y = f(x) for x.  Whatever the
        route, the answer is kept only if g(f(x)) equals f'(x) at a few points.
        """
        if self.saves != "output":
            raise ValueError(f"{self.name} saves its input")
        d = self.derivative
        spotted = d.subs(self.formula, Y)
        for g in self._output_forms(d, spotted):
            if X not in g.free_symbols and all(
                    abs(complex(g.subs(Y, self.formula).subs(X, x) - d.subs(X, x))) < 1e-12
                    for x in _check_points(self.domain, sympy.Rational)):
                return g
        raise ValueError(f"cannot write {self.name}' in terms of its output")

    def _output_forms(self, derivative: sympy.Expr, spotted: sympy.Expr) -> Iterator[sympy.Expr]:
        """Candidates for f' in terms of y, most direct first.  A polynomial
        in y is left as it is (``sympy.simplify`` costs 0.3 s on its first call)."""
        def tidy(g: sympy.Expr) -> sympy.Expr:
            return g if g.is_polynomial(Y) else sympy.simplify(g)

        if X not in spotted.free_symbols:
            yield tidy(spotted)
            return
        u = sympy.Dummy("u")
        for atom in sorted(spotted.atoms(sympy.Function), key=sympy.default_sort_key):
            in_u = self.formula.subs(atom, u)
            if X in atom.free_symbols and X not in in_u.free_symbols:
                numerator = sympy.numer(sympy.together(Y - in_u))
                if numerator.is_polynomial(u) and sympy.degree(numerator, u) == 1:
                    a, b = sympy.Poly(numerator, u).all_coeffs()
                    yield tidy(spotted.subs(atom, -b / a))
        # check=False skips SymPy's own (slow) check of each inverse.
        for inverse in sympy.solve(sympy.Eq(Y, self.formula), X, check=False):
            yield sympy.simplify(derivative.subs(X, inverse))

    @cached_property
    def cost(self) -> int:
        """FLOPs per element of f (operations in its formula)."""
        return _operations(self.formula)

    @cached_property
    def derivative_cost(self) -> int:
        """FLOPs per element of f' as the rule evaluates it (in x or in y)."""
        expr = self.derivative_of_output if self.saves == "output" else self.derivative
        return _operations(expr)


def _operations(expr: sympy.Expr) -> int:
    """``sympy.count_ops`` of ``expr``, a square root or reciprocal square
    root of an expression in the variable counted as one operation (not a
    power and the division of its exponent ``1/2``); constants such as gelu's
    ``sqrt(2)`` are left as ``count_ops`` has them."""
    root = sympy.Function("root")
    one = expr.replace(lambda e: (e.is_Pow and e.exp in (sympy.S.Half, -sympy.S.Half)
                                  and bool(e.base.free_symbols & {X, Y})),
                       lambda e: root(e.base))
    return int(sympy.count_ops(one))


def _check_points(domain: Domain, number: Callable[[int, int], Any]) -> tuple[Any, ...]:
    """A few points inside ``domain`` where forms of a function are compared."""
    if domain == "positive":
        return (number(3, 10), number(2, 5), number(21, 10), number(7, 1))
    return (number(-13, 10), number(-1, 5), number(2, 5), number(21, 10))


_SQRT_2_OVER_PI = sympy.sqrt(2 / sympy.pi)

FUNCTIONS: dict[str, Function] = {f.name: f for f in (
    Function("relu", sympy.Max(0, X), "input", r"\operatorname{relu}",
             "rectified linear unit, max(0, x)", "relu"),
    Function("sigmoid", 1 / (1 + sympy.exp(-X)), "output", r"\sigma",
             "logistic sigmoid", "sigmoid"),
    Function("tanh", sympy.tanh(X), "output", r"\tanh", "hyperbolic tangent", "tanh"),
    Function("exp", sympy.exp(X), "output", r"\exp", "exponential", "exp"),
    Function("silu", X / (1 + sympy.exp(-X)), "input", r"\operatorname{silu}",
             "sigmoid-weighted linear unit (swish), x * sigmoid(x)", "silu"),
    Function("gelu", X / 2 * (1 + sympy.erf(X / sympy.sqrt(2))), "input",
             r"\operatorname{gelu}", "Gaussian error linear unit, exact (erf) form", "gelu"),
    Function("gelu_tanh",
             X / 2 * (1 + sympy.tanh(_SQRT_2_OVER_PI * (X + sympy.Rational(44715, 10**6) * X**3))),
             "input", r"\operatorname{gelu}_{\tanh}",
             "Gaussian error linear unit, tanh approximation", "gelu", (("approximate", "tanh"),)),
    Function("softplus", sympy.log(1 + sympy.exp(X)), "input", r"\operatorname{softplus}",
             "softplus, log(1 + exp(x)), counted and evaluated as this formula at every x "
             "(PyTorch's softplus, beta = 1, returns x itself where x > 20)", "softplus"),
    Function("elu", sympy.Piecewise((X, X > 0), (sympy.exp(X) - 1, True)), "input",
             r"\operatorname{elu}", "exponential linear unit (alpha = 1), x for x > 0, "
             "exp(x) - 1 otherwise", "elu"),
    Function("square", X**2, "input", r"\operatorname{square}", "the square, x^2", "square"),
    Function("abs", sympy.Abs(X), "input", r"\operatorname{abs}",
             "the absolute value, |x| (its derivative sign(x), 0 at 0, as PyTorch takes it)",
             "abs"),
    Function("log", sympy.log(X), "input", r"\log", "the natural logarithm, for x > 0", "log",
             domain="positive"),
    # SymPy spots sqrt(x) in sqrt'(x) = 1/(2 sqrt(x)): the rule reads the output, 1/(2y).
    Function("sqrt", sympy.sqrt(X), "output", r"\operatorname{sqrt}",
             "the square root, for x > 0", "sqrt", domain="positive"),
    Function("rsqrt", 1 / sympy.sqrt(X), "output", r"\operatorname{rsqrt}",
             "the reciprocal square root, 1/sqrt(x), for x > 0", "rsqrt", domain="positive"),
    # Read as the input: inside a product (a division) there is no output to read.
    Function(RECIPROCAL, 1 / X, "input", r"\operatorname{reciprocal}",
             "the reciprocal, 1/x, taken on x > 0, the divisors of normalisers (a division "
             "by a tensor, N[s,f] / Z[s], is N[s,f] times it; verify draws a divisor positive "
             "and refuses one that is not)", "reciprocal",
             domain="positive"),
)}


def known() -> str:
    return ", ".join(sorted(FUNCTIONS))


def expression(fn: Apply) -> tuple[sympy.Expr, sympy.Symbol]:
    """The SymPy formula a factor's function computes, and its variable."""
    f = FUNCTIONS[fn.name]
    if fn.form == "value":
        return f.formula, X
    if fn.form == "derivative":
        return f.derivative, X
    return f.derivative_of_output, Y


def cost(fn: Apply, in_product: bool = False) -> int:
    """FLOPs per element of evaluating ``fn`` (see the module's convention).
    ``in_product``: the factor is multiplied with other tensors; a reciprocal
    there is a division, whose divide is the multiply the product counts
    (``N[s,f] / Z[s]``: one divide per output element, nothing per ``Z``)."""
    f = FUNCTIONS[fn.name]
    if fn.form == "value" and fn.name == RECIPROCAL and in_product:
        return 0
    return f.cost if fn.form == "value" else f.derivative_cost




@lru_cache(maxsize=None)
def numpy_function(fn: Apply) -> Callable[[np.ndarray], np.ndarray]:
    """A NumPy callable for ``fn``, compiled from its SymPy formula."""
    expr, var = expression(fn)
    # relu's derivative is Heaviside(x); at 0 take 0 (PyTorch's convention).
    expr = expr.subs(sympy.Heaviside(var), sympy.Heaviside(var, 0))
    extra = {"erf": np.vectorize(math.erf, otypes=[float]),
             "Heaviside": lambda x, h0=0.0: np.heaviside(x, h0)}
    compiled = sympy.lambdify(var, expr, modules=[extra, "numpy"])
    return lambda a: np.broadcast_to(compiled(a), np.shape(a)).astype(float)


def check_output_form(name: str, points: tuple[float, ...] | None = None) -> float:
    """Largest |f'(x) - g(f(x))| at a few points (inside the function's
    domain unless given): the derived output form is the derivative."""
    f = FUNCTIONS[name]
    worst = 0.0
    for p in points or _check_points(f.domain, lambda a, b: a / b):
        d = float(f.derivative.subs(X, p))
        g = float(f.derivative_of_output.subs(Y, f.formula.subs(X, p)))
        worst = max(worst, abs(d - g))
    return worst

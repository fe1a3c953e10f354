"""The einsum op kind: a sum of einsum products (``H[b,f] = X[b,d] W_in[d,f] + b_in[f]``).

:mod:`.node` is the IR node and what each stage asks of it; :mod:`.rules`
derives its backward rules by index calculus, :mod:`.orders` and
:mod:`.cost` count its pairwise products, :mod:`.numeric` and :mod:`.torch`
run it in NumPy and PyTorch.
"""

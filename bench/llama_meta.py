"""Llama-shaped decoder and a pre-norm transformer block, as plain PyTorch
modules, built on the ``meta`` device (shapes only, no memory) so that
``torch.utils.flop_counter.FlopCounterMode`` can trace a forward and backward
pass of a 7B-size model in a fraction of a second.

* :class:`Llama`: token embedding, L blocks (RMSNorm, causal grouped-query
  attention with N query heads of width E and G key/value heads, residual;
  RMSNorm, SwiGLU MLP of width F, residual), a final RMSNorm and an untied
  unembedding to V logits, cross-entropy loss.  No rotary embedding: it is
  elementwise and FlopCounterMode counts it as 0 anyway.
* :class:`PreNormBlock`: ``derivations/transformer_block.yaml`` written in
  PyTorch (LayerNorm with gain and bias, causal multi-head attention, GELU MLP
  with biases, two residuals) on one sequence of S tokens.

Attention is written out (``Q K^T``, mask, softmax, ``P V``), as the
declarations write it; PyTorch computes both products over the full S x S
square and masks afterwards, so that is what FlopCounterMode counts.

Run as a script, it prints the traced FLOP count of forward + backward::

    python bench/llama_meta.py llama L=32 B=1 S=4096 D=4096 N=32 G=32 E=128 F=11008 V=32000
    python bench/llama_meta.py transformer_block S=4096 D=4096 N=32 E=128 F=11008
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as fn
from torch import nn

META = torch.device("meta")


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.gain = nn.Parameter(torch.empty(width, device=META))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``q`` (..., N, S, E), ``k`` and ``v`` (..., N, T, E): softmax(q k^T / sqrt(E),
    masked to t <= s) v, with both products over the full square."""
    s, t = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, t, dtype=torch.bool, device=q.device).tril()
    probabilities = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return probabilities @ v


class Attention(nn.Module):
    """Grouped-query attention: N query heads, G key/value heads (G divides N)."""

    def __init__(self, D: int, N: int, G: int, E: int):
        super().__init__()
        self.N, self.G, self.E = N, G, E
        self.q = nn.Linear(D, N * E, bias=False, device=META)
        self.k = nn.Linear(D, G * E, bias=False, device=META)
        self.v = nn.Linear(D, G * E, bias=False, device=META)
        self.o = nn.Linear(N * E, D, bias=False, device=META)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        q = self.q(x).view(B, S, self.N, self.E).transpose(1, 2)
        k = self.k(x).view(B, S, self.G, self.E).transpose(1, 2)
        v = self.v(x).view(B, S, self.G, self.E).transpose(1, 2)
        repeat = self.N // self.G  # each key/value head serves N/G query heads (a copy)
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = causal_attention(q, k, v)
        return self.o(out.transpose(1, 2).reshape(B, S, self.N * self.E))


class SwiGLU(nn.Module):
    def __init__(self, D: int, F: int):
        super().__init__()
        self.gate = nn.Linear(D, F, bias=False, device=META)
        self.up = nn.Linear(D, F, bias=False, device=META)
        self.down = nn.Linear(F, D, bias=False, device=META)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(fn.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, D: int, N: int, G: int, E: int, F: int):
        super().__init__()
        self.attention_norm = RMSNorm(D)
        self.attention = Attention(D, N, G, E)
        self.mlp_norm = RMSNorm(D)
        self.mlp = SwiGLU(D, F)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, L: int, D: int, N: int, G: int, E: int, F: int, V: int):
        super().__init__()
        self.embedding = nn.Embedding(V, D, device=META)
        self.blocks = nn.ModuleList(LlamaBlock(D, N, G, E, F) for _ in range(L))
        self.norm = RMSNorm(D)
        self.unembedding = nn.Linear(D, V, bias=False, device=META)  # untied

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.unembedding(self.norm(x))
        return fn.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")


class PreNormBlock(nn.Module):
    """``derivations/transformer_block.yaml``: one sequence, multi-head."""

    def __init__(self, D: int, N: int, E: int, F: int):
        super().__init__()
        self.N, self.E = N, E
        self.norm1 = nn.LayerNorm(D, device=META)  # gain g1, bias c1
        self.q = nn.Linear(D, N * E, bias=False, device=META)
        self.k = nn.Linear(D, N * E, bias=False, device=META)
        self.v = nn.Linear(D, N * E, bias=False, device=META)
        self.o = nn.Linear(N * E, D, bias=False, device=META)
        self.norm2 = nn.LayerNorm(D, device=META)  # gain g2, bias c2
        self.up = nn.Linear(D, F, device=META)     # W_in, b_in
        self.down = nn.Linear(F, D, device=META)   # W_out, b_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        S = x.shape[0]
        h = self.norm1(x)
        q, k, v = (p(h).view(S, self.N, self.E).transpose(0, 1) for p in (self.q, self.k, self.v))
        y1 = x + self.o(causal_attention(q, k, v).transpose(0, 1).reshape(S, self.N * self.E))
        return y1 + self.down(fn.gelu(self.up(self.norm2(y1))))


def traced_flops(model: str, dims: dict[str, int]) -> dict[str, int]:
    """Build ``model`` at ``dims`` on the meta device, run forward and backward
    under FlopCounterMode; FLOPs of each pass and per PyTorch operator."""
    from torch.utils.flop_counter import FlopCounterMode

    if model == "llama":
        net = Llama(*(dims[k] for k in ("L", "D", "N", "G", "E", "F", "V")))
        tokens = torch.empty(dims["B"], dims["S"], dtype=torch.long, device=META)
        args = (tokens, torch.empty_like(tokens))
    elif model == "transformer_block":
        net = PreNormBlock(*(dims[k] for k in ("D", "N", "E", "F")))
        args = (torch.empty(dims["S"], dims["D"], device=META, requires_grad=True),)
    else:
        raise ValueError(f"unknown model {model!r}")
    with FlopCounterMode(display=False) as forward_counter:
        out = net(*args)
    with FlopCounterMode(display=False) as backward_counter:
        out.sum().backward()
    counts = {"forward": forward_counter.get_total_flops(),
              "backward": backward_counter.get_total_flops()}
    counts["total"] = counts["forward"] + counts["backward"]
    for name, counter in (("forward", forward_counter), ("backward", backward_counter)):
        for op, flops in counter.get_flop_counts()["Global"].items():
            counts[f"{name}:{op}"] = flops
    return counts


def main(argv: list[str]) -> int:
    model, values = argv[0], argv[1:]
    dims = {k: int(v) for k, v in (item.split("=", 1) for item in values)}
    counts = traced_flops(model, dims)
    print(f"{model}: forward {counts['forward']} backward {counts['backward']} "
          f"total {counts['total']} FLOPs (FlopCounterMode)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

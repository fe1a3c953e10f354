"""Precision policies: bytes per element of each kind of stored tensor.

Memory polynomials are counted in elements; a policy turns them into bytes.
Policies are named so that sheets and the CLI can say which one they used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The policies' names, as a declaration's ``precision:`` and ``--precision`` give them.
PolicyName = Literal["bf16-adam", "mixed-adam", "fp32-adam", "bf16-sgd"]


@dataclass(frozen=True)
class Precision:
    name: PolicyName
    description: str
    params: int            # bytes per parameter element (working copy)
    grads: int             # bytes per gradient element
    optimizer_states: int  # optimizer state tensors per trainable parameter
    optimizer: int         # bytes per element of each state
    master: int            # bytes per trainable parameter of a master copy (0: none)
    activations: int       # bytes per saved activation element
    masks: int = 1         # bytes per element of a saved boolean mask
    optimizer_name: str = "Adam"

    @property
    def state_names(self) -> tuple[str, ...]:
        """Names of the optimizer's per-parameter states (Adam: m and v)."""
        if self.optimizer_states == 0:
            return ()
        if self.optimizer_name == "Adam" and self.optimizer_states == 2:
            return ("Adam m", "Adam v")
        return tuple(f"{self.optimizer_name} state {k + 1}" for k in range(self.optimizer_states))

    @property
    def bytes_per_trainable_param(self) -> int:
        return self.params + self.grads + self.optimizer_states * self.optimizer + self.master


POLICIES: dict[PolicyName, Precision] = {
    p.name: p
    for p in (
        Precision("bf16-adam", "bf16 weights, gradients and activations; Adam m and v in fp32 "
                  "(the feed-forward cheatsheet's table)", 2, 2, 2, 4, 0, 2),
        Precision("mixed-adam", "mixed precision with Adam: bf16 weights and gradients, fp32 "
                  "master weights, Adam m and v in fp32, bf16 activations (16 bytes/param)",
                  2, 2, 2, 4, 4, 2),
        Precision("fp32-adam", "everything in fp32 with Adam m and v", 4, 4, 2, 4, 0, 4),
        Precision("bf16-sgd", "bf16 weights, gradients and activations; plain SGD, no state",
                  2, 2, 0, 4, 0, 2, optimizer_name="SGD"),
    )
}

DEFAULT_POLICY: PolicyName = "bf16-adam"


def policy(name: str | None) -> Precision:
    """The named policy (the default when ``name`` is None); KeyError if unknown."""
    return POLICIES[name or DEFAULT_POLICY]


def dtype_name(nbytes: int) -> str:
    """The usual number format for a byte width, for table labels."""
    return {1: "8-bit", 2: "bf16", 4: "fp32", 8: "fp64"}.get(nbytes, f"{nbytes}-byte")

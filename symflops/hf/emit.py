"""The text of a declaration written by ``symflops import-hf``: a small builder.

A family module (:mod:`symflops.hf.families`) says what the model has,
dim by dim, tensor by tensor, op by op, each with the config key behind it;
:class:`Declaration` lays it out as a whole-model declaration, its blocks
inline under ``blocks:`` (one file to read, edit and run), in the format the
docs/declarations.md documents and :mod:`symflops.declaration.reader` reads.  Nothing here
counts: the counts come from the engine reading the text.

Values are written from trusted data only (integers, names the family module
chose).  Every text that may hold anything else (a title or an example's
name made from the config's path, a description) is a double-quoted scalar
(:func:`quoted`) and every comment line is made printable (:func:`comment_lines`),
so no text, whatever characters it holds (a line break, ``#``, ``:``, a
quote, a control or format character), ends its scalar or its comment: the
text read back holds exactly the keys and values written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..core.errors import printable


def quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar: ``"`` and ``\\`` escaped, and
    every character that is not printable (line breaks of every kind, other
    control and format characters) written as its YAML escape (``\\x0a``,
    ``\\u202e``), so the scalar is one line of printable text; a lone
    surrogate, which no YAML can hold, is written as the text of its escape."""
    out = []
    for c in text:
        code = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif c == " " or c.isprintable():
            out.append(c)
        elif 0xD800 <= code <= 0xDFFF:  # a lone surrogate (a byte of a path not UTF-8):
            out.append(f"\\\\u{code:04x}")  # no YAML holds one; its escape as text
        else:
            out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF
                       else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def comment_lines(text: str) -> list[str]:
    """``text`` as YAML comment lines, one per line of it, each with its
    characters that are not printable shown as escapes (a YAML comment ends
    at any line break, and a control character is not allowed in YAML at all)."""
    return [f"# {printable(line)}" if line else "#" for line in text.splitlines() or [""]]


#: how a component of each kind of block is labelled when a model has two kinds
KINDS = {"full": "full-attention layers", "sliding": "sliding-window layers",
         "dense": "dense layers", "moe": "MoE layers", "sparse": "MoE layers"}


#: What the parallelism presets split (``roles:``; see symflops/shard/roles.py), by the
#: dim names the families write: the key/value heads where they are grouped (each
#: group's query heads go with it), else the heads; every MLP's hidden width (dense,
#: routed and shared experts); the routed experts; the vocabulary.
ROLE_DIMS = (("heads", ("G",)), ("heads", ("N",)), ("hidden", ("F", "Fd", "Fm", "Fe", "Fs")),
             ("experts", ("M",)), ("vocab", ("V",)))


def _roles(names: list[str]) -> str:
    """The ``roles:`` mapping of a block over the dims ``names`` (empty: none)."""
    found: dict[str, list[str]] = {}
    for role, dims in ROLE_DIMS:
        if role in found:
            continue
        have = [d for d in dims if d in names]
        if have:
            found[role] = have
    return ", ".join(f"{r}: {d[0] if len(d) == 1 else '[' + ', '.join(d) + ']'}"
                     for r, d in found.items())


@dataclass(frozen=True)
class Dim:
    name: str
    description: str
    value: int | None = None      # its value at the config (None: a formula, or B)
    equals: str | None = None     # a defined dim: its formula of other dims
    key: str = ""                 # the config key (or keys) it comes from


@dataclass
class Block:
    """An inline block: its dims (names of the model's), tensors, ops."""

    name: str
    title: str
    dims: list[str] = field(default_factory=list)
    tensors: list[tuple[str, str]] = field(default_factory=list)   # (name, line)
    ops: list[str] = field(default_factory=list)                   # lines, comments included
    components: list[tuple[str, list[str]]] = field(default_factory=list)
    selective: list[str] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)         # tensor -> role
    outputs: list[str] = field(default_factory=list)            # op outputs, in order
    label: str | None = None      # its layers, in its components' names (default: KINDS)

    def tensor(self, name: str, shape: list[str], role: str, description: str) -> None:
        self.roles[name] = role
        self.tensors.append((name, f"{{shape: [{', '.join(shape)}], role: {role}, "
                                   f"description: {quoted(description)}}}"))

    def op(self, statement: str, comment: str | None = None) -> None:
        if comment:
            self.ops.extend(comment_lines(comment))
        self.ops.append(f"- {statement}")
        self.outputs.append(statement.split("[", 1)[0].strip())

    def own(self) -> list[str]:
        """The block's own tensors (parameters and op outputs), which a second
        block of a model must name differently; inputs, indices and buffers are
        bound to the model's."""
        return [n for n in dict.fromkeys([*(n for n, r in self.roles.items()
                                            if r in ("param", "frozen")), *self.outputs])]

    def component(self, name: str, outputs: list[str]) -> None:
        self.components.append((name, outputs))

    def include(self, block: str, repeat: str | None = None,
                tensors: dict[str, str] | None = None, comment: str | None = None) -> None:
        if comment:
            self.ops.extend(comment_lines(comment))
        self.ops.append(f"- include: {block}")
        if repeat is not None:
            self.ops.append(f"  repeat: {repeat}")
        if tensors:
            self.ops.append("  tensors: {" + ", ".join(f"{k}: {v}" for k, v in tensors.items())
                            + "}")

    def uses(self, *names: str) -> None:
        for n in names:
            if n not in self.dims:
                self.dims.append(n)


@dataclass
class Declaration:
    """A whole model: its dims with their config values, its own tensors and
    ops (embedding, includes, head, loss) and its inline blocks."""

    name: str
    title: str
    header: list[str] = field(default_factory=list)          # comment lines at the top
    dims: dict[str, Dim] = field(default_factory=dict)
    model: Block = field(default_factory=lambda: Block("", ""))
    blocks: list[Block] = field(default_factory=list)
    example: str = "config"
    notes: list[str] = field(default_factory=list)            # comment lines at the end
    #: the longest sequence the model takes and the config key that sets it (a learned
    #: position table's rows), for the planner; None: any length (rotary positions)
    longest: tuple[int, str] | None = None
    #: whether transformers runs the experts otherwise than the model defines them
    executed_differs: bool = False
    #: the number every sequence length must be a multiple of, and the key that sets it
    #: (Llama 4's chunks, counted exactly); None: any length
    multiple: tuple[int, str] | None = None
    #: what else lets another length be counted, for the refusal's hint ("" when nothing)
    multiple_alternative: str = ""

    def dim(self, name: str, description: str, value: int | None = None, key: str = "",
            equals: str | None = None) -> str:
        have = self.dims.get(name)
        if have is not None and (have.value, have.equals) != (value, equals):
            raise ValueError(f"dim {name} declared twice with different values")
        self.dims[name] = Dim(name, description, value, equals, key)
        return name

    def block(self, name: str, title: str) -> Block:
        b = Block(name, title)
        self.blocks.append(b)
        return b

    # -- layout ------------------------------------------------------------

    def _closure(self, used: list[str]) -> list[str]:
        """The dims ``used`` and those their formulas name, in the model's order."""
        want = set(used)
        more = list(used)
        while more:
            d = self.dims.get(more.pop())
            if d is not None and d.equals:
                for name in re.findall(r"[A-Za-z_]\w*", d.equals):
                    if name in self.dims and name not in want:
                        want.add(name)
                        more.append(name)
        return [n for n in self.dims if n in want]

    def _dims_lines(self, names: list[str], indent: str) -> list[str]:
        out = [f"{indent}dims:"]
        for n in names:
            d = self.dims[n]
            if d.equals is not None:
                out.append(f"{indent}  {n}: {{description: {quoted(d.description)}, "
                           f"equals: {d.equals}}}")
            else:
                note = f"   {comment_lines(d.key)[0]}" if d.key else ""
                out.append(f"{indent}  {n}: {quoted(d.description)}{note}")
        return out

    def _body(self, b: Block, indent: str, names: list[str], top: bool) -> list[str]:
        out = [f"{indent}name: {b.name}", f"{indent}title: {quoted(b.title)}"]
        out += self._dims_lines(names, indent)
        out += [f"{indent}tokens: B*S", f"{indent}sequences: B"]
        roles = _roles(names)
        if roles:
            out.append(f"{indent}roles: {{{roles}}}")
        if b.selective:
            out += [f"{indent}recompute:", f"{indent}  selective: [{', '.join(b.selective)}]"]
        out.append(f"{indent}tensors:")
        out += [f"{indent}  {n}: {line}" for n, line in b.tensors]
        if b.components:
            # two kinds of block: each component says whose it is ("attention (sliding)")
            kind = b.name.removeprefix("layer_")
            label = f" ({b.label or KINDS.get(kind, kind)})" \
                if not top and len(self.blocks) > 1 else ""
            out.append(f"{indent}components:")
            out += [f"{indent}  {quoted(n + label)}: [{', '.join(ops)}]"
                    for n, ops in b.components]
        out.append(f"{indent}ops:")
        out += [f"{indent}  {line}" for line in b.ops]
        return out

    def text(self) -> str:
        """The declaration's YAML text."""
        return self._text(whole=True)

    def structure(self) -> str:
        """The text without what names the config file or holds the config's
        values: the header's comments, the model's title and the examples.
        The engine derives the same formulas from any two configs of one
        shape (Llama-2-7B and Llama-2-13B), so the planner keeps one model for
        both (:mod:`symflops.planner.compiled`), each evaluated at its own dims."""
        return self._text(whole=False)

    def _text(self, whole: bool) -> str:
        lines = [line for h in self.header for line in comment_lines(h)] if whole else []
        self.model.name, self.model.title = self.name, self.title if whole else ""
        used = list(self.dims)
        lines += self._body(self.model, "", used, True)
        if self.blocks:
            lines.append("blocks:")
            for b in self.blocks:
                lines.append(f"  {b.name}:")
                names = self._closure(b.dims)
                lines += self._body(b, "    ", names, False)
        values = {n: d.value for n, d in self.dims.items() if d.value is not None}
        lines += [line for n in self.notes for line in comment_lines(n)]
        if not whole:
            return "\n".join(lines) + "\n"
        lines.append("examples:")
        lines.append(f"  {quoted(self.example)}: {{"
                     + ", ".join(f"{n}: {v}" for n, v in values.items()) + "}")
        return "\n".join(lines) + "\n"

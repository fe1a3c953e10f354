"""YAML read safely into values that remember where they were written.

A declaration is composed by PyYAML's safe loader into nodes, and every value
becomes a :class:`Node` with its :class:`~symflops.core.errors.Span`, so that
an error anywhere in the declaration can point at the text.  Composing is
bounded: at most :data:`MAX_YAML_VALUES` values with aliases expanded and
:data:`MAX_YAML_DEPTH` levels of nesting.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any, Collection, Mapping

import yaml

from ..core.errors import Span, SymflopsError, quote


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Node:
    """A YAML value with the place it was written.  Mappings hold
    ``{key: (key_span, Node)}``; sequences hold lists of Nodes."""

    value: Any
    span: Span | None
    quoted: bool = False


def _span(mark: Any, file: str, lines: list[str]) -> Span:
    text = lines[mark.line] if mark.line < len(lines) else ""
    return Span(file, mark.line + 1, mark.column + 1, text)


#: Values a declaration may hold once aliases are expanded (a shipped model has
#: a few hundred): a 500-byte "billion laughs" document of nested aliases stands
#: for 10**9 of them.
MAX_YAML_VALUES = 100_000


#: Nesting of mappings and lists (a shipped declaration nests 4 deep).
MAX_YAML_DEPTH = 50


def _convert(node: yaml.Node, file: str, lines: list[str], constructor: Any,
             budget: list[int], depth: int = 0) -> Node:
    """``node`` as located Nodes; ``budget`` holds the values still allowed
    (every alias expansion counts again)."""
    span = _span(node.start_mark, file, lines)
    budget[0] -= 1
    if budget[0] < 0:
        raise SymflopsError(f"the declaration holds more than {MAX_YAML_VALUES:,} values once "
                            "its aliases are expanded", span,
                            "write the declaration out without nested aliases (*name)")
    if depth > MAX_YAML_DEPTH:
        raise SymflopsError(f"the declaration nests mappings and lists more than {MAX_YAML_DEPTH} "
                            "levels deep", span, "a declaration needs a few levels of nesting")
    if isinstance(node, yaml.MappingNode):
        items: dict[str, tuple[Span, Node]] = {}
        for key_node, value_node in node.value:
            key_span = _span(key_node.start_mark, file, lines)
            if not isinstance(key_node, yaml.ScalarNode):
                raise SymflopsError("a key must be a plain name", key_span,
                                    "write keys as names, e.g. 'X: {shape: [B, D]}'")
            key = str(constructor.construct_object(key_node))
            if key in items:
                first = items[key][0]
                raise SymflopsError(f"{key!r} is defined twice (first at line {first.line})",
                                    key_span, f"remove or rename one of the two {key!r} entries")
            items[key] = (key_span, _convert(value_node, file, lines, constructor, budget,
                                             depth + 1))
        return Node(items, span)
    if isinstance(node, yaml.SequenceNode):
        return Node([_convert(n, file, lines, constructor, budget, depth + 1) for n in node.value],
                    span)
    value = constructor.construct_object(node)
    quoted = node.style in ("'", '"')
    if quoted:
        span = span.shifted(1)
    return Node(value, span, quoted)


#: libyaml's safe loader when PyYAML was built with it (ten times faster), else PyYAML's own.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _known_key_before_error(text: str, keys: Collection[str]) -> bool:
    """Whether ``text``, read as far as it is valid YAML, is a mapping with one
    of ``keys`` at its top level: a file gone wrong further on is still a
    declaration and its line may be shown; one that is not (``/etc/shadow``,
    a list, a scalar, an error at its first token) is not quoted."""
    depth, key_next = 0, True
    try:
        for event in yaml.parse(text, Loader=SAFE_LOADER):
            if not isinstance(event, (yaml.NodeEvent, yaml.CollectionEndEvent)):
                continue  # stream and document events
            if depth == 0:
                if not isinstance(event, yaml.MappingStartEvent):
                    return False
                depth = 1
            elif depth == 1:
                if isinstance(event, yaml.CollectionEndEvent):
                    return False
                if key_next and isinstance(event, yaml.ScalarEvent) and event.value in keys:
                    return True
                if isinstance(event, yaml.CollectionStartEvent):
                    depth += 1  # a value (or a key) that is a collection: its end toggles
                else:
                    key_next = not key_next
            elif isinstance(event, yaml.CollectionStartEvent):
                depth += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                if depth == 1:
                    key_next = not key_next
    except yaml.YAMLError:
        pass
    return False


def parse_yaml(text: str, file: str, keys: Collection[str] | None = None) -> Node:
    """Compose YAML safely into located :class:`Node` values.  ``keys``: the
    top-level keys of the format (a declaration's): a mapping with none of
    them is refused at once as no such file, naming no key and showing no
    line of it, and a YAML error shows its line only when the text before it
    was one (:func:`~symflops.core.errors.quotable` has the rest of the rule)."""
    lines = text.splitlines()
    try:
        root = yaml.compose(text, Loader=SAFE_LOADER)
        if keys is not None and isinstance(root, yaml.MappingNode) and root.value and not any(
                isinstance(k, yaml.ScalarNode) and k.value in keys for k, _ in root.value):
            mark = root.start_mark
            raise SymflopsError("this file is not a declaration: none of its top-level keys is "
                                "one a declaration has", Span(file, mark.line + 1, mark.column + 1),
                                f"a declaration is a mapping with keys such as "
                                f"{', '.join(list(keys)[:6])}, ...")
        if root is not None:  # constructing a scalar can fail too (an unknown tag: !B)
            return _convert(root, file, lines, yaml.constructor.SafeConstructor(),
                            [MAX_YAML_VALUES])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if keys is not None and not _known_key_before_error(text, keys):
            lines = []  # not a declaration as far as it goes: its lines are not shown
        span = _span(mark, file, lines) if mark else Span(file, 1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        hint = ("remove the tag; YAML tags are not part of the format"
                if isinstance(exc, yaml.constructor.ConstructorError)
                else "check indentation, colons and brackets near this place")
        raise SymflopsError(f"this is not valid YAML: {problem}", span, hint) from None
    except yaml.YAMLError as exc:
        raise SymflopsError(f"this is not valid YAML: {exc}", Span(file, 1, 1),
                            "check the file's syntax") from None
    raise SymflopsError("the declaration is empty", Span(file, 1, 1),
                        "write a mapping with 'dims', 'tensors' and 'ops'")


def from_python(value: Any) -> Node:
    if isinstance(value, Mapping):
        return Node({str(k): (None, from_python(v)) for k, v in value.items()}, None)
    if isinstance(value, (list, tuple)):
        return Node([from_python(v) for v in value], None)
    return Node(value, None)


def mapping(node: Node, what: str, hint: str) -> dict[str, tuple[Span | None, Node]]:
    if not isinstance(node.value, dict):
        raise SymflopsError(f"{what} must be a mapping, found {describe(node.value)}", node.span, hint)
    return node.value


def describe(value: Any, show: bool = True) -> str:
    """What a YAML value is, for a message: its kind, and (when ``show``) a
    short quote of it, never more than a few dozen characters."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):  # its items are located Nodes: name the keys only
        if not value:
            return "an empty mapping"
        keys = ", ".join(quote(k, 30) for k in list(value)[:5])
        return f"a mapping with keys {keys}" + (", ..." if len(value) > 5 else "")
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the text {quote(value)}" if show else "text"
    return f"{type(value).__name__} {quote(value)}" if show else type(value).__name__


def check_identifier(name: str, span: Span | None, what: str) -> None:
    if not IDENT.match(name) or keyword.iskeyword(name):
        raise SymflopsError(f"{what} {name!r} is not a valid name", span,
                            "use letters, digits and underscores, starting with a letter")


def text_of(node: Node, what: str) -> str:
    if node.value is None:
        return ""
    if not isinstance(node.value, (str, int, float)) or isinstance(node.value, bool):
        raise SymflopsError(f"{what} must be text, found {describe(node.value)}", node.span,
                            "write it as a plain string")
    return str(node.value)

"""One-line errors from pydantic validation, for every untrusted document (suites, bundle
manifests, results): the first problem, its key path (``functions[0].steps[3].bindings[1]``),
what was expected and what was found, with line breaks from the file escaped.

Schemas live beside the format they describe (``bench/suite_schema.py``,
``bundle/manifest_schema.py``, ``bench/results_schema.py``); this module only words their errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

__all__ = ["key_path", "one_line"]

#: pydantic's type-error kinds, in the words of JSON (what a file's author sees).
_TYPES = {"int_type": "int", "int_parsing": "int", "float_type": "a finite number",
          "float_parsing": "a finite number", "finite_number": "a finite number",
          "string_type": "str", "bool_type": "bool", "list_type": "list", "tuple_type": "list",
          "dict_type": "dict", "model_type": "dict", "model_attributes_type": "dict",
          "none_required": "null", "int_from_float": "int", "is_instance_of": "dict"}


def key_path(loc: tuple[Any, ...], label: Callable[[tuple[Any, ...]], str] | None = None,
             tags: frozenset[str] = frozenset()) -> str:
    """``("functions", 0, "steps", 3)`` -> ``functions[0].steps[3]``; ``label(prefix)`` may add a
    name after a list item (results name their benchmarks: ``benchmarks[3](resnet50/b1)``);
    a discriminated union's tag in ``tags`` after an item is shown as ``steps[3](dispatch)``."""
    out = ""
    for i, part in enumerate(loc):
        if part in tags and i and isinstance(loc[i - 1], int):
            out += f"({part})"
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        if label is not None and isinstance(part, int):
            out += label(loc[: i + 1])
    return out


def _shown(v: Any) -> str:
    if v is None:
        return "null"
    return f"{type(v).__name__} {v!r:.40}"


def one_line(e: ValidationError, where: str = "", *, expected: str = "expected",
             missing: str = "{path}: missing",
             label: Callable[[tuple[Any, ...]], str] | None = None,
             tags: frozenset[str] = frozenset()) -> str:
    """The first error of ``e`` as one line: ``{where}: {path}: {what}`` (``where`` may be empty).

    ``expected`` words type errors (``expected int, got str '1'`` or ``must be int, ...``);
    ``missing`` words a missing key from ``{path}``, ``{parent}`` and ``{key}``.
    A validator's message that starts with ``.key:`` names a field below the object it checked.
    """
    err = e.errors()[0]
    loc = tuple(err["loc"])
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        text = missing.format(path=key_path(loc, label, tags), parent=key_path(loc[:-1], label, tags) or "document",
                              key=loc[-1] if loc else "")
    else:
        path = key_path(loc, label, tags)
        if kind == "extra_forbidden":
            path = key_path(loc[:-1], label, tags) or "document"
            msg = f"unknown key '{loc[-1]}' (a typo, or a newer halbench's file?)"
        elif kind in _TYPES:
            msg = f"{expected} {_TYPES[kind]}, got {_shown(value)}"
        elif kind == "literal_error":
            want = str(ctx.get("expected", ""))
            if " or " in want or "," in want:
                want = "one of " + want.replace("'", "").replace(" or ", ", ")
            msg = f"{expected} {want}, got {value!r:.40}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
                  "less_than_equal": "<="}[kind]
            bound = next(iter(ctx.values()), "?")
            positive = (kind, bound) in (("greater_than", 0), ("greater_than_equal", 1))
            msg = (f"must be positive, got {value!r:.40}" if positive
                   else f"{expected} a number {op} {bound}, got {value!r:.40}")
        elif kind == "string_pattern_mismatch":
            msg = f"{expected} a string matching {ctx.get('pattern')}, got {value!r:.40}"
        elif kind in ("too_long", "too_short", "string_too_long", "string_too_short"):
            msg = err["msg"].replace("Value should", "must").replace("String should", "must")
        elif kind == "union_tag_invalid":
            tags = str(ctx.get("expected_tags", "")).replace("'", "")
            disc = str(ctx.get("discriminator", "kind")).strip("'")
            msg = f"unknown {disc} {ctx.get('tag')!r}; known: {tags}"
        else:
            msg = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
            if msg.startswith(".") and ":" in msg:  # a validator naming the field it checked
                field, _, msg = msg[1:].partition(":")
                path = f"{path}.{field}" if path else field
                msg = msg.strip()
        text = f"{path or 'document'}: {msg}"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    line = f"{where}: {text}{more}" if where else f"{text}{more}"
    # Keys and values come from the file: escape line breaks so the error stays one line.
    return line.replace("\r", "\\r").replace("\n", "\\n")

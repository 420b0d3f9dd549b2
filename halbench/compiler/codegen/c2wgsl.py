"""The kernels' C subset -> WGSL, by parsing it: typed, not by pattern replacement.

The kernel templates and the body emitter (lang.py) write one small C subset that GLSL, CUDA
and HIP all accept: ``int``/``uint``/``float``/``bool``/``int64_t`` declarations, functional
casts ``float(x)``, ``?:``, ``for``/``if``/``return``, calls, indexing and ``.x`` members.
WGSL differs in ways that need types, not text: no implicit conversions (C's usual arithmetic
conversions are made explicit here), shift amounts must be ``u32``, ``?:`` is
``select(f, t, c)``, declarations are ``var name: T``, and an ``if``/``for`` body is a block.

:func:`translate` parses statements with a recursive-descent parser, infers every
expression's type from declarations, literals and the known functions, and writes WGSL.
Anything outside the subset is a CompileError naming the construct, never a silent guess.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from halbench.errors import CompileError

__all__ = ["C_TYPES", "Scope", "translate", "translate_function"]

#: C-subset type -> WGSL type
C_TYPES = {"int": "i32", "uint": "u32", "float": "f32", "bool": "bool", "int64_t": "i64", "uint64_t": "u64",
           "vec4": "vec4<f32>", "float4": "vec4<f32>", "float16_t": "f16", "void": ""}
_ABSTRACT_INT, _ABSTRACT_FLOAT = "aint", "afloat"
_FLOATS = ("f32", "f16", _ABSTRACT_FLOAT)
_INTS = ("i32", "u32", "i64", "u64", _ABSTRACT_INT)

_TOKEN = re.compile(r"""
    (?P<num>0[xX][0-9a-fA-F]+[uU]?[lL]*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFuUlL]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op><<=|>>=|\+\+|--|&&|\|\||==|!=|<=|>=|<<|>>|\+=|-=|\*=|/=|%=|&=|\|=|\^=|[-+*/%<>=!~&|^?:;,(){}\[\].])
  | (?P<ws>\s+)
""", re.VERBOSE)


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise CompileError(f"WGSL translation: cannot read {text[pos:pos + 30]!r}")
        if m.lastgroup != "ws":
            out.append(m.group())
        pos = m.end()
    return out


@dataclass
class Scope:
    """What names mean: variables and their WGSL types, functions and their return types."""

    vars: dict[str, str] = field(default_factory=dict)
    #: function name -> (WGSL name or template with {0},{1}..., return type or a rule)
    funcs: dict[str, tuple[str, str | Callable[[list[str]], str]]] = field(default_factory=dict)
    #: indexable names (bindings, shared arrays) -> element type
    arrays: dict[str, str] = field(default_factory=dict)
    parent: Scope | None = None

    def _find(self, table: str, name: str) -> Any:
        """``name`` in ``table`` (vars, funcs or arrays) of this scope or the nearest enclosing one."""
        s: Scope | None = self
        while s is not None:
            if name in getattr(s, table):
                return getattr(s, table)[name]
            s = s.parent
        return None

    def lookup(self, name: str) -> str | None:
        return self._find("vars", name)

    def func(self, name: str) -> tuple[str, str | Callable[[list[str]], str]] | None:
        return self._find("funcs", name)

    def array(self, name: str) -> str | None:
        return self._find("arrays", name)

    def child(self) -> Scope:
        return Scope(parent=self)


def _same(args: list[str]) -> str:
    return _unify(args) if args else "f32"


#: C / GLSL / CUDA spellings of math functions -> WGSL (return type follows the arguments)
BUILTINS: dict[str, tuple[str, str | Callable[[list[str]], str]]] = {
    **{n: (n, _same) for n in ("exp", "exp2", "log", "log2", "sqrt", "abs", "ceil", "floor", "sin", "cos", "atan",
                               "max", "min", "fma", "sign", "trunc", "pow", "tanh", "clamp", "tan", "acos",
                               "asin", "acosh", "asinh", "atanh", "cosh", "sinh")},
    "isinf": ("(abs({0}) > 3.4028234663852886e38)", "bool"),
    "inversesqrt": ("inverseSqrt", _same), "roundEven": ("round", _same), "atan2": ("atan2", _same),
    "hb_bits_f32": ("bitcast<f32>({0})", "f32"), "hb_f32_bits": ("bitcast<i32>({0})", "i32"),
    "hb_f32_ubits": ("bitcast<u32>({0})", "u32"), "hb_u_bits_f32": ("bitcast<f32>({0})", "f32"),
    "workgroupBarrier": ("workgroupBarrier", ""),
    # GLSL spellings the shared math library uses
    "intBitsToFloat": ("bitcast<f32>({0})", "f32"), "uintBitsToFloat": ("bitcast<f32>({0})", "f32"),
    "floatBitsToInt": ("bitcast<i32>({0})", "i32"), "floatBitsToUint": ("bitcast<u32>({0})", "u32"),
    "mod": ("({0} - {1} * floor({0} / {1}))", "f32"),
}

#: WGSL keywords and reserved words a C variable may be called: renamed with a trailing '_'.
RESERVED = frozenset(["alias", "break", "case", "const", "const_assert", "continue", "continuing", "default", "diagnostic", "discard", "else", "enable", "false", "fn", "for", "if", "let", "loop", "override", "requires", "return", "struct", "switch", "true", "var", "while", "active", "as", "asm", "auto", "cast", "catch", "char", "class", "do", "enum", "export", "extern", "final", "from", "get", "global", "goto", "handle", "impl", "in", "inline", "input", "is", "layout", "match", "meta", "module", "move", "mut", "new", "nil", "noexcept", "null", "of", "operator", "package", "packoffset", "partition", "pass", "patch", "precise", "precision", "priority", "protected", "pub", "public", "readonly", "ref", "regardless", "register", "reinterpret_cast", "resource", "restrict", "self", "set", "shared", "signed", "sizeof", "smooth", "snorm", "static", "super", "template", "this", "throw", "trait", "try", "typedef", "typename", "typeof", "union", "unless", "unorm", "unsafe", "unsized", "use", "using", "varying", "virtual", "volatile", "wgsl", "where", "with", "writeonly", "yield"])


def safe(name: str) -> str:
    return name + "_" if name in RESERVED else name


@dataclass
class _Expr:
    text: str
    type: str
    prec: int = 100  # binding strength of the outermost operator (100: atomic)


def _unify(types: list[str]) -> str:
    """C's usual arithmetic conversions over WGSL types (abstract literals adapt)."""
    concrete = [t for t in types if t not in (_ABSTRACT_INT, _ABSTRACT_FLOAT)]
    if any(t in ("f32", "f16") for t in concrete):
        return "f16" if all(t == "f16" for t in concrete if t in _FLOATS) and "f32" not in concrete else "f32"
    if not concrete:
        return _ABSTRACT_FLOAT if _ABSTRACT_FLOAT in types else _ABSTRACT_INT
    if _ABSTRACT_FLOAT in types:
        return "f32"
    for t in ("u64", "i64", "u32", "i32", "bool"):
        if t in concrete:
            return t
    return concrete[0]


def _conv(e: _Expr, want: str) -> str:
    """``e`` as type ``want`` (a WGSL conversion when it is another concrete type)."""
    if e.type == want or want in ("", None):
        return e.text
    if e.type == _ABSTRACT_INT and want in _INTS + _FLOATS:
        return e.text
    if e.type == _ABSTRACT_FLOAT and want in _FLOATS:
        return e.text
    if want.startswith("vec") or e.type.startswith("vec"):
        return e.text
    return f"{_concrete(want)}({e.text})"


def _concrete(t: str) -> str:
    return {"aint": "i32", "afloat": "f32"}.get(t, t)


_BIN_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
             "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}


class _Parser:
    def __init__(self, tokens: list[str], scope: Scope):
        self.t, self.i, self.scope = tokens, 0, scope

    # -- helpers ----------------------------------------------------------------------
    def peek(self, k: int = 0) -> str:
        return self.t[self.i + k] if self.i + k < len(self.t) else ""

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if want is not None and tok != want:
            near = " ".join(self.t[max(0, self.i - 6): self.i + 6])
            raise CompileError(f"WGSL translation: expected '{want}', got '{tok}' near: {near}")
        self.i += 1
        return tok

    def is_type(self, tok: str) -> bool:
        return tok in C_TYPES and tok != "void"

    # -- statements -------------------------------------------------------------------
    def statements(self, end: str = "") -> list[str]:
        out: list[str] = []
        while self.peek() and self.peek() != end:
            out += self.statement()
        return out

    def block_or_statement(self) -> list[str]:
        outer = self.scope
        self.scope = outer.child()
        try:
            if self.peek() == "{":
                self.take("{")
                body = self.statements("}")
                self.take("}")
                return body
            return self.statement()
        finally:
            self.scope = outer

    def statement(self) -> list[str]:
        tok = self.peek()
        if tok == "{":
            return ["{", *_indent(self.block_or_statement()), "}"]
        if tok == ";":
            self.take()
            return []
        if tok == "if":
            self.take()
            self.take("(")
            cond = self.expr()
            self.take(")")
            then = self.block_or_statement()
            lines = [f"if ({_conv(cond, 'bool')}) {{", *_indent(then), "}"]
            if self.peek() == "else":
                self.take()
                lines[-1] = "} else {"
                lines += [*_indent(self.block_or_statement()), "}"]
            return lines
        if tok == "for":
            return self.for_loop()
        if tok in ("break", "continue"):
            self.take()
            self.take(";")
            return [f"{tok};"]
        if tok == "return":
            self.take()
            if self.peek() == ";":
                self.take()
                return ["return;"]
            e = self.expr()
            self.take(";")
            ret = self.scope.lookup("$return") or ""
            return [f"return {_conv(e, ret)};"]
        if self.is_type(tok) and self.peek(1) not in ("(",):
            return self.declaration()
        line = self.simple()
        self.take(";")
        return [line + ";"]

    def declaration(self) -> list[str]:
        ctype = self.take()
        wtype = C_TYPES[ctype]
        out = []
        while True:
            name = safe(self.take())
            if self.peek() == "[":
                raise CompileError("WGSL translation: local arrays are not in the kernel subset")
            if self.peek() == "=":
                self.take()
                e = self.expr()
                out.append(f"var {name}: {wtype} = {_conv(e, wtype)};")
            else:
                out.append(f"var {name}: {wtype};")
            self.scope.vars[name] = wtype
            if self.peek() == ",":
                self.take()
                continue
            self.take(";")
            return out

    def for_loop(self) -> list[str]:
        self.take("for")
        self.take("(")
        outer = self.scope
        self.scope = outer.child()
        try:
            init = ""
            if self.is_type(self.peek()):
                decl = self.declaration()  # consumes the ';'
                init = decl[0].rstrip(";")
            else:
                if self.peek() != ";":
                    init = self.simple()
                self.take(";")
            cond = "true" if self.peek() == ";" else _conv(self.expr(), "bool")
            self.take(";")
            step = "" if self.peek() == ")" else self.simple()
            self.take(")")
            body = self.block_or_statement()
        finally:
            self.scope = outer
        return [f"for ({init}; {cond}; {step}) {{", *_indent(body), "}"]

    def simple(self) -> str:
        """An assignment, increment or call, without its ';'."""
        if self.peek() in ("++", "--"):
            op = self.take()
            target = self.postfix()
            return f"{target.text}{op}"
        target = self.unary()
        op = self.peek()
        if op in ("++", "--"):
            self.take()
            return f"{target.text}{op}"
        if op in ("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="):
            self.take()
            value = self.expr()
            if op in ("<<=", ">>="):
                return f"{target.text} {op} {_conv(value, 'u32')}"
            if op != "=" and value.type != target.type:
                want = _unify([target.type, value.type])
                if want != target.type and want not in (_ABSTRACT_INT, _ABSTRACT_FLOAT):
                    # C: x op= y computes in the wider type and converts back
                    sym = op[:-1]
                    inner = f"{_conv(target, want)} {sym} {_conv(value, want)}"
                    return f"{target.text} = {_concrete(target.type)}({inner})"
            return f"{target.text} {op} {_conv(value, target.type)}"
        if target.type == "":  # a call whose value is discarded (a barrier, a store helper)
            return target.text
        return f"_ = {target.text}"

    # -- expressions ------------------------------------------------------------------
    def expr(self) -> _Expr:
        cond = self.binary(1)
        if self.peek() != "?":
            return cond
        self.take("?")
        a = self.expr()
        self.take(":")
        b = self.expr()
        t = _unify([a.type, b.type])
        t = _concrete(t) if (a.type != b.type or t in (_ABSTRACT_INT, _ABSTRACT_FLOAT)) else t
        return _Expr(f"select({_conv(b, t)}, {_conv(a, t)}, {_conv(cond, 'bool')})", t)

    def binary(self, min_prec: int) -> _Expr:
        left = self.unary()
        while True:
            op = self.peek()
            prec = _BIN_PREC.get(op)
            if prec is None or prec < min_prec:
                return left
            self.take()
            right = self.binary(prec + 1)
            left = self.combine(op, left, right, prec)

    def combine(self, op: str, a: _Expr, b: _Expr, prec: int) -> _Expr:
        def wrap(e: _Expr, p: int) -> str:
            return f"({e.text})" if e.prec <= p else e.text

        if op in ("&&", "||"):
            ba = _Expr(_conv(a, "bool"), "bool", a.prec if a.type == "bool" else 100)
            bb = _Expr(_conv(b, "bool"), "bool", b.prec if b.type == "bool" else 100)
            return _Expr(f"{wrap(ba, prec)} {op} {wrap(bb, prec)}", "bool", prec)
        if op in ("<<", ">>"):
            amount = b.text if b.type in ("u32", _ABSTRACT_INT) else f"u32({b.text})"
            return _Expr(f"{wrap(a, prec)} {op} {wrap(_Expr(amount, 'u32', b.prec if amount == b.text else 100), prec)}",
                         a.type if a.type != _ABSTRACT_INT else "i32", prec)
        if a.type == "bool" and b.type == "bool" and op in ("&", "|", "^"):
            return _Expr(f"{wrap(a, prec)} {op} {wrap(b, prec)}", "bool", prec)
        t = _unify([a.type, b.type])
        ta = _Expr(_conv(a, t), t, a.prec if _conv(a, t) == a.text else 100)
        tb = _Expr(_conv(b, t), t, b.prec if _conv(b, t) == b.text else 100)
        text = f"{wrap(ta, prec)} {op} {wrap(tb, prec)}"
        if op in ("==", "!=", "<", "<=", ">", ">="):
            return _Expr(text, "bool", prec)
        return _Expr(text, t, prec)

    def unary(self) -> _Expr:
        tok = self.peek()
        if tok in ("-", "!", "~", "+"):
            self.take()
            e = self.unary()
            if tok == "+":
                return e
            if tok == "!":
                return _Expr(f"!({_conv(e, 'bool')})" if e.prec < 100 else f"!{_conv(e, 'bool')}", "bool", 11)
            inner = f"({e.text})" if e.prec < 100 else e.text
            return _Expr(f"{tok}{inner}", e.type, 11)
        return self.postfix()

    def postfix(self) -> _Expr:
        e = self.primary()
        while True:
            if self.peek() == "[":
                self.take()
                idx = self.expr()
                self.take("]")
                elem = self.scope.array(e.text)
                if elem is None:
                    raise CompileError(f"WGSL translation: '{e.text}' is not a known array")
                e = _Expr(f"{e.text}[{_conv(idx, 'i32') if idx.type not in ('i32', 'u32') else idx.text}]", elem)
            elif self.peek() == ".":
                self.take()
                member = self.take()
                base = e.type.removeprefix("vec4<").removeprefix("vec3<").rstrip(">") or "f32"
                e = _Expr(f"{e.text}.{member}", base)
            else:
                return e

    def primary(self) -> _Expr:
        tok = self.take()
        if tok == "(":
            e = self.expr()
            self.take(")")
            return _Expr(f"({e.text})", e.type)
        if tok[0].isdigit() or tok[0] == ".":
            return _literal(tok)
        if tok in ("true", "false"):
            return _Expr(tok, "bool")
        if tok in C_TYPES:  # a functional cast: float(x), uint(x)
            self.take("(")
            args = self.args()
            want = C_TYPES[tok]
            if len(args) != 1:
                return _Expr(f"{want}({', '.join(_conv(a, 'f32') for a in args)})", want)
            a = args[0]
            if a.type == want:
                return a
            return _Expr(f"{want}({a.text})", want)
        if self.peek() == "(":
            self.take("(")
            args = self.args()
            f = self.scope.func(tok) or BUILTINS.get(tok)
            if f is None:
                raise CompileError(f"WGSL translation: unknown function '{tok}'")
            name, rtype = f
            rt = rtype([a.type for a in args]) if callable(rtype) else rtype
            if "{0}" in name:
                return _Expr(name.format(*(a.text for a in args)), rt)
            params = self.scope.lookup(f"$params:{tok}")
            if params:
                texts = [_conv(a, p) for a, p in zip(args, params.split(","))]
            elif callable(rtype) and rt not in ("", "bool"):
                texts = [_conv(a, _concrete(rt)) for a in args]
                rt = _concrete(rt)
            else:
                texts = [a.text for a in args]
            return _Expr(f"{name}({', '.join(texts)})", rt)
        name = safe(tok)
        t = self.scope.lookup(name)
        if t is None and self.scope.array(name) is None:
            raise CompileError(f"WGSL translation: unknown name '{tok}'")
        return _Expr(name, t or "array")

    def args(self) -> list[_Expr]:
        out = []
        while self.peek() != ")":
            out.append(self.expr())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return out


def _literal(tok: str) -> _Expr:
    low = tok.lower()
    if low.startswith("0x"):
        digits = low.rstrip("ul")
        if low.endswith("u") or "u" in low[len(digits):]:
            return _Expr(f"{digits}u", "u32")
        return _Expr(digits, _ABSTRACT_INT)
    is_float = any(c in low for c in ".e") and not low.startswith("0x")
    core = low.rstrip("ful")
    if is_float or low.endswith("f"):
        if "." not in core and "e" not in core:
            core += ".0"
        return _Expr(f"{core}f", "f32") if low.endswith("f") else _Expr(core, _ABSTRACT_FLOAT)
    if low.endswith("u"):
        return _Expr(f"{core}u", "u32")
    if low.endswith("l"):
        return _Expr(f"{core}li", "i64")
    return _Expr(core, _ABSTRACT_INT)


def _indent(lines: list[str]) -> list[str]:
    return ["  " + ln for ln in lines]


def translate(code: str, scope: Scope) -> list[str]:
    """WGSL statements for C-subset statements ``code`` (declared names go into ``scope``)."""
    p = _Parser(_tokens(code), scope)
    out = p.statements()
    if p.peek():
        raise CompileError(f"WGSL translation: unexpected '{p.peek()}'")
    return out


def translate_function(ret: str, name: str, params: str, body: list[str], scope: Scope) -> list[str]:
    """A C-subset function as a WGSL ``fn``; it is registered in ``scope`` for its callers."""
    inner = scope.child()
    wparams = []
    ptypes = []
    for p in [p.strip() for p in params.split(",") if p.strip()]:
        ctype, pname = p.split()
        inner.vars[pname] = C_TYPES[ctype]
        wparams.append(f"{pname}_in: {C_TYPES[ctype]}")
        ptypes.append(C_TYPES[ctype])
    inner.vars["$return"] = C_TYPES[ret]
    scope.funcs[name] = (name, C_TYPES[ret])
    scope.vars[f"$params:{name}"] = ",".join(ptypes)
    # WGSL parameters are immutable; the C body may assign them, so copy each into a var.
    copies = [f"var {p.split('_in:')[0]}: {t} = {p.split(':')[0]};" for p, t in zip(wparams, ptypes)]
    lines = translate("\n".join(body), inner)
    head = f"fn {name}({', '.join(wparams)})" + (f" -> {C_TYPES[ret]}" if C_TYPES[ret] else "")
    return [head + " {", *_indent(copies + lines), "}"]


def declare(scope: Scope, names: Mapping[str, str]) -> None:
    scope.vars.update(names)

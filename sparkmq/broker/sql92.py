"""SQL92 property filters: RocketMQ's selector language, parsed once, evaluated per message.

The grammar and the evaluation rules are RocketMQ's (``org.apache.rocketmq.filter``, itself
ActiveMQ's JMS selector): comparisons ``> >= < <= = <>``, ``[NOT] BETWEEN a AND b``,
``[NOT] IN ('x', ...)``, ``IS [NOT] NULL``, ``[NOT] CONTAINS / STARTSWITH / ENDSWITH 'x'``,
``AND OR NOT``, parentheses, ``TRUE FALSE NULL``, integer and decimal literals, quoted strings
(``''`` escapes a quote); keywords are case-insensitive. Properties are strings: a comparison
with a number converts the property the way Java's ``Long.valueOf`` / ``Double.valueOf`` would.

Three-valued logic as in Java: a comparison with a missing property is *unknown*, ``AND`` /
``OR`` / ``NOT`` propagate unknown, and a message matches only when the whole expression is
TRUE. A property that cannot be converted (``a > 5`` with ``a='x'``) makes Java's evaluator
throw, which its message filter turns into "no match": here too the message does not match.

>>> selector = compile_sql92("a BETWEEN 1 AND 5 AND color IN ('red', 'blue')")
>>> selector.matches({"a": "3", "color": "red"}), selector.matches({"a": "9", "color": "red"})
(True, False)
>>> selector.matches({"color": "red"})  # a is missing: unknown, so no match
False
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, UnexpectedInput, UnexpectedToken, VisitError

from sparkmq.errors import SubscriptionParseError

MAX_EXPRESSION_CHARS = 4096  # a subscription string longer than this is refused before parsing
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"\s*[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)\s*")

Value = Any  # str | int | float | bool | None
Node = Callable[[Mapping[str, str]], Value]

_GRAMMAR = r"""
start: or_expr
?or_expr: and_expr | or_expr _OR and_expr -> or_
?and_expr: equality | and_expr _AND equality -> and_
?equality: comparison
    | equality "=" comparison -> eq
    | equality "<>" comparison -> ne
    | equality _IS _NULL -> is_null
    | equality _IS _NOT _NULL -> is_not_null
?comparison: unary
    | comparison ">" unary -> gt
    | comparison ">=" unary -> ge
    | comparison "<" unary -> lt
    | comparison "<=" unary -> le
    | comparison _BETWEEN unary _AND unary -> between
    | comparison _NOT _BETWEEN unary _AND unary -> not_between
    | comparison _IN "(" string ("," string)* ")" -> in_
    | comparison _NOT _IN "(" string ("," string)* ")" -> not_in
    | comparison _CONTAINS string -> contains
    | comparison _NOT _CONTAINS string -> not_contains
    | comparison _STARTSWITH string -> startswith
    | comparison _NOT _STARTSWITH string -> not_startswith
    | comparison _ENDSWITH string -> endswith
    | comparison _NOT _ENDSWITH string -> not_endswith
?unary: primary | "+" unary | "-" unary -> neg | _NOT unary -> not_
?primary: STRING -> text | DECIMAL -> decimal | FLOAT -> floating | _TRUE -> true | _FALSE -> false
    | _NULL -> null | ID -> prop | "(" or_expr ")"
string: STRING

_OR.2: /OR\b/i
_AND.2: /AND\b/i
_NOT.2: /NOT\b/i
_IS.2: /IS\b/i
_NULL.2: /NULL\b/i
_TRUE.2: /TRUE\b/i
_FALSE.2: /FALSE\b/i
_BETWEEN.2: /BETWEEN\b/i
_IN.2: /IN\b/i
_CONTAINS.2: /CONTAINS\b/i
_STARTSWITH.2: /STARTSWITH\b/i
_ENDSWITH.2: /ENDSWITH\b/i
FLOAT.1: /([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
DECIMAL: /(0|[1-9][0-9]*)[lL]?/
STRING: /'([^']|'')*'/
ID: /[a-zA-Z_$][a-zA-Z0-9_$]*/
%ignore /[ \t\r\n\f]+/
"""


class _ConversionError(Exception):
    """Java's evaluator would throw (e.g. NumberFormatException): the message does not match."""


@dataclass(frozen=True)
class _Expr:
    """A compiled node and what kind of thing it is (for RocketMQ's parse-time checks)."""

    run: Node
    kind: str  # "bool" | "prop" | "const" | "value"
    const: Value = None


@dataclass(frozen=True)
class Sql92Selector:
    """A compiled SQL92 expression; ``matches(properties)`` is what a broker asks per message."""

    expression: str
    _root: Node

    def matches(self, properties: Mapping[str, str]) -> bool:
        """True only when the expression is TRUE for ``properties`` (unknown and errors: False)."""
        try:
            return self._root(properties) is True
        except _ConversionError:
            return False


def _number_of(text: str, like: Value) -> Value:
    """``text`` converted to the type of the number ``like`` (Java's valueOf), or raise."""
    if isinstance(like, float):
        if not _JAVA_DOUBLE.fullmatch(text):
            raise _ConversionError(text)
        return float(text.strip().rstrip("fFdD"))
    if not _JAVA_LONG.fullmatch(text):
        raise _ConversionError(text)
    number = int(text)
    low, high = _INT32 if _INT32[0] <= like <= _INT32[1] else _INT64
    if not low <= number <= high:
        raise _ConversionError(text)
    return number


def _compare(left: Value, right: Value) -> int:
    """``ComparisonExpression.__compare`` with string conversion on: -1, 0 or 1."""
    if type(left) is not type(right):
        numbers = (int, float)
        if isinstance(left, bool) or isinstance(right, bool):
            if isinstance(left, str):
                left = left.lower() == "true"
            elif isinstance(right, str) and isinstance(left, bool):
                raise _ConversionError(right)  # Java casts the Boolean to String here and throws
            else:
                return -1
        elif isinstance(left, str) and isinstance(right, numbers):
            left = _number_of(left, right)
        elif isinstance(right, str) and isinstance(left, numbers):
            right = _number_of(right, left)
        elif not (isinstance(left, numbers) and isinstance(right, numbers)):
            return -1
    return int(left > right) - int(left < right)


def _ordering(test: Callable[[int], bool]) -> Callable[[_Expr, _Expr], _Expr]:
    def build(left: _Expr, right: _Expr) -> _Expr:
        for side in (left, right):
            if side.kind == "bool":
                raise SubscriptionParseError(
                    "a boolean expression cannot be compared with <, <=, > or >= (NOT binds tighter: write NOT (a > 1))"
                )
            if side.kind == "const" and not _is_number(side.const):
                raise SubscriptionParseError(f"value {side.const!r} cannot be compared with <, <=, > or >=")
        lrun, rrun = left.run, right.run

        def run(props: Mapping[str, str]) -> Value:
            lv, rv = lrun(props), rrun(props)
            if lv is None or rv is None:
                return None
            return test(_compare(lv, rv))

        return _Expr(run, "bool")

    return build


def _is_number(value: Value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(left: _Expr, right: _Expr) -> _Expr:
    lrun, rrun = left.run, right.run

    def run(props: Mapping[str, str]) -> Value:
        lv, rv = lrun(props), rrun(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv == rv and type(lv) is type(rv):
            return True
        return _compare(lv, rv) == 0

    return _Expr(run, "bool")


def _boolean(expr: _Expr) -> Node:
    """``asBooleanExpression``: a property becomes a boolean cast; other values are refused."""
    if expr.kind == "bool" or (expr.kind == "const" and isinstance(expr.const, bool)):
        return expr.run
    if expr.kind == "prop":
        run = expr.run
        return lambda props: None if (value := run(props)) is None else value is True
    raise SubscriptionParseError(f"expression will not result in a boolean value: {expr.const!r}")


def _not(node: Node) -> Node:
    return lambda props: None if (value := node(props)) is None else not value


def _logic(decisive: bool) -> Callable[[Node, Node], Node]:
    """AND (``decisive`` False) or OR (True) in three-valued logic, short-circuiting as Java does."""

    def build(left: Node, right: Node) -> Node:
        def run(props: Mapping[str, str]) -> Value:
            lv = left(props)
            if lv is decisive:
                return decisive
            rv = right(props)
            if rv is decisive:
                return decisive
            return None if lv is None or rv is None else not decisive

        return run

    return build


_and = _logic(False)
_or = _logic(True)


def _string_test(test: Callable[[str, str], bool], negate: bool) -> Callable[[_Expr, str], _Expr]:
    def build(left: _Expr, search: str) -> _Expr:
        run = left.run

        def evaluate(props: Mapping[str, str]) -> Value:
            value = run(props)
            if not search or not isinstance(value, str):
                return False
            return test(value, search) != negate

        return _Expr(evaluate, "bool")

    return build


def _membership(negate: bool) -> Callable[..., _Expr]:
    def build(left: _Expr, *items: str) -> _Expr:
        if left.kind != "prop":
            raise SubscriptionParseError(f"expected a property for IN, got {left.const!r}")
        run, members = left.run, frozenset(items)

        def evaluate(props: Mapping[str, str]) -> Value:
            value = run(props)
            return None if not isinstance(value, str) else (value in members) != negate

        return _Expr(evaluate, "bool")

    return build


def _constant(value: Value) -> _Expr:
    return _Expr(lambda props: value, "const", value)


@v_args(inline=True)
class _Compiler(Transformer[Token, Node]):
    """Parse tree → closures, bottom-up, with RocketMQ's parse-time checks."""

    def start(self, expr: _Expr) -> Node:
        return _boolean(expr)

    def string(self, token: Token) -> str:
        return str(token)[1:-1].replace("''", "'")

    def text(self, token: Token) -> _Expr:
        return _constant(self.string(token))

    def decimal(self, token: Token) -> _Expr:
        number = int(str(token).rstrip("lL"))
        if not _INT64[0] <= number <= _INT64[1]:
            raise SubscriptionParseError(f"integer {token} is out of the 64-bit range")
        return _constant(number)

    def floating(self, token: Token) -> _Expr:
        return _constant(float(token))

    def true(self) -> _Expr:
        return _constant(True)

    def false(self) -> _Expr:
        return _constant(False)

    def null(self) -> _Expr:
        return _constant(None)

    def prop(self, token: Token) -> _Expr:
        name = str(token)
        return _Expr(lambda props: props.get(name), "prop", name)

    def __default__(self, data: Any, children: Any, meta: Any) -> Any:
        raise SubscriptionParseError(f"unsupported construct {data}")  # every rule has a method

    def neg(self, expr: _Expr) -> _Expr:
        if expr.kind == "const":
            if not _is_number(expr.const):
                raise SubscriptionParseError(f"cannot negate {expr.const!r}")
            return _constant(-expr.const)
        run = expr.run
        return _Expr(lambda props: -v if _is_number(v := run(props)) else None, "value")

    def not_(self, expr: _Expr) -> _Expr:
        return _Expr(_not(_boolean(expr)), "bool")

    def and_(self, left: _Expr, right: _Expr) -> _Expr:
        return _Expr(_and(_boolean(left), _boolean(right)), "bool")

    def or_(self, left: _Expr, right: _Expr) -> _Expr:
        return _Expr(_or(_boolean(left), _boolean(right)), "bool")

    eq = staticmethod(_equal)
    gt = staticmethod(_ordering(lambda c: c > 0))
    ge = staticmethod(_ordering(lambda c: c >= 0))
    lt = staticmethod(_ordering(lambda c: c < 0))
    le = staticmethod(_ordering(lambda c: c <= 0))
    in_ = staticmethod(_membership(False))
    not_in = staticmethod(_membership(True))
    contains = staticmethod(_string_test(str.__contains__, False))
    not_contains = staticmethod(_string_test(str.__contains__, True))
    startswith = staticmethod(_string_test(str.startswith, False))
    not_startswith = staticmethod(_string_test(str.startswith, True))
    endswith = staticmethod(_string_test(str.endswith, False))
    not_endswith = staticmethod(_string_test(str.endswith, True))

    def ne(self, left: _Expr, right: _Expr) -> _Expr:
        return _Expr(_not(_equal(left, right).run), "bool")

    def is_null(self, left: _Expr) -> _Expr:
        return _equal(left, _constant(None))

    def is_not_null(self, left: _Expr) -> _Expr:
        return _Expr(_not(_equal(left, _constant(None)).run), "bool")

    def between(self, value: _Expr, low: _Expr, high: _Expr) -> _Expr:
        if low.kind == high.kind == "const":
            if low.const is None or high.const is None:
                raise SubscriptionParseError("illegal values of BETWEEN: values can not be NULL")
            if _is_number(low.const) and _is_number(high.const) and high.const < low.const:
                raise SubscriptionParseError(
                    f"illegal values of BETWEEN: left value ({low.const}) must be less than or equal to "
                    f"right ({high.const})"
                )
        return _Expr(_and(self.ge(value, low).run, self.le(value, high).run), "bool")

    def not_between(self, value: _Expr, low: _Expr, high: _Expr) -> _Expr:
        return _Expr(_or(self.lt(value, low).run, self.gt(value, high).run), "bool")


_PARSER = Lark(_GRAMMAR, parser="lalr", lexer="basic", maybe_placeholders=False)  # keywords never lex as names


@lru_cache(maxsize=1024)
def compile_sql92(expression: str) -> Sql92Selector:
    """Parse and compile ``expression``; raise :class:`SubscriptionParseError` naming the position.

    >>> compile_sql92("a >").expression
    Traceback (most recent call last):
    ...
    sparkmq.errors.SubscriptionParseError: SQL92 expression 'a >' is invalid at column 4: unexpected end of expression
    """
    if not expression or not expression.strip():
        raise SubscriptionParseError("SQL92 expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise SubscriptionParseError(f"SQL92 expression of {len(expression)} characters exceeds {MAX_EXPRESSION_CHARS}")
    try:
        tree = _PARSER.parse(expression)
    except UnexpectedInput as exc:
        at_end = isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
        column = len(expression) + 1 if at_end else exc.column
        at = exc.pos_in_stream or 0
        found = "end of expression" if at_end else repr(expression[at : at + 12])
        raise SubscriptionParseError(
            f"SQL92 expression {expression!r} is invalid at column {column}: unexpected {found}"
        ) from exc
    except LarkError as exc:
        raise SubscriptionParseError(f"SQL92 expression {expression!r} is invalid: {exc}") from exc
    try:
        root = _Compiler().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SubscriptionParseError):
            raise SubscriptionParseError(f"SQL92 expression {expression!r} is invalid: {exc.orig_exc.remark}") from exc
        raise
    return Sql92Selector(expression, root)

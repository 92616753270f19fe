"""DynamoDB's expression languages, the part srm's stores use: conditions (and key conditions, filters) and updates.

Conditions: comparisons (``= <> < <= > >=``), ``BETWEEN … AND …``, ``IN (…)``, ``AND``/``OR``/``NOT``,
parentheses, and the functions ``attribute_exists``, ``attribute_not_exists``, ``attribute_type``, ``begins_with``,
``contains`` and ``size``. Updates: ``SET`` (a value, a path, ``if_not_exists``, ``list_append``, ``+``/``-``),
``REMOVE``, ``ADD`` (numbers). Paths are top-level attribute names or ``#placeholders``; values are ``:placeholders``.
Semantics follow DynamoDB: numbers compare as decimals, a comparison of different types or with a missing attribute
is false, and an unknown placeholder is a ``ValidationException``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["ExpressionError", "Item", "Value", "apply_update", "compile_condition", "sort_key"]

Value = dict[str, Any]  # a typed attribute value: {"S": "x"}, {"N": "1"}, {"BOOL": true}, {"M": {…}}, …
Item = dict[str, Value]


class ExpressionError(ValueError):
    """An expression DynamoDB would reject (answered as a ValidationException)."""


_TOKEN = re.compile(
    r"\s*(?:(?P<op><>|<=|>=|=|<|>|\(|\)|,|\+|-)|(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*))"
)
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExpressionError(f"Invalid expression: unexpected {text[pos : pos + 10]!r} in {text!r}")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        token = m.group(kind)
        if kind == "word" and token.upper() in _KEYWORDS:
            out.append(("kw", token.upper()))
        else:
            out.append((kind, token))
    return out


def _number(value: Value) -> Decimal:
    return Decimal(value["N"])


def sort_key(value: Value) -> Any:
    """How DynamoDB orders a key attribute: numbers by value, strings and binary by their bytes."""
    if "N" in value:
        return _number(value)
    if "S" in value:
        return value["S"]
    if "B" in value:
        return value["B"]
    raise ExpressionError(f"a key attribute must be a string, number or binary: {value}")


def _comparable(a: Value | None, b: Value | None) -> tuple[Any, Any] | None:
    if a is None or b is None:
        return None
    (ta, va), (tb, vb) = next(iter(a.items())), next(iter(b.items()))
    if ta != tb:
        return None
    if ta == "N":
        return Decimal(va), Decimal(vb)
    if ta in ("S", "B"):
        return va, vb
    return None


def _equal(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None:
        return False
    if "N" in a and "N" in b:
        return _number(a) == _number(b)
    return a == b


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
}

Operand = Callable[[Item], "Value | None"]
Predicate = Callable[[Item], bool]


@dataclass
class _Parser:
    tokens: list[tuple[str, str]]
    names: Mapping[str, str]
    values: Mapping[str, Value]
    pos: int = 0

    # -- tokens --------------------------------------------------------------------------------------------------
    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, kind: str | None = None, text: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (kind and token[0] != kind) or (text and token[1] != text):
            want = text or kind or "more"
            raise ExpressionError(f"Invalid expression: expected {want}, found {token[1] if token else 'the end'}")
        self.pos += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        if self.peek() == (kind, text):
            self.pos += 1
            return True
        return False

    def done(self) -> None:
        if self.peek() is not None:
            raise ExpressionError(f"Invalid expression: unexpected {self.peek()[1]!r}")  # type: ignore[index]

    # -- names and values ------------------------------------------------------------------------------------------
    def path(self) -> str:
        kind, token = self.take()
        if kind == "name":
            if token not in self.names:
                raise ExpressionError(f"An expression attribute name used in the document path is not defined: {token}")
            return self.names[token]
        if kind == "word":
            return token
        raise ExpressionError(f"Invalid expression: expected an attribute, found {token!r}")

    def value(self, token: str) -> Value:
        if token not in self.values:
            raise ExpressionError(f"An expression attribute value used in expression is not defined: {token}")
        return self.values[token]

    # -- conditions ------------------------------------------------------------------------------------------------
    def condition(self) -> Predicate:
        return self.joined("OR", self.conjunction, any)

    def conjunction(self) -> Predicate:
        return self.joined("AND", self.negation, all)

    def joined(
        self, keyword: str, operand: Callable[[], Predicate], join: Callable[[Iterable[bool]], bool]
    ) -> Predicate:
        """Operands joined by ``keyword`` (``a OR b OR c``): evaluated left to right, no further than the answer is
        known (``join`` is ``any`` or ``all``)."""
        operands = [operand()]
        while self.accept("kw", keyword):
            operands.append(operand())
        if len(operands) == 1:
            return operands[0]
        return lambda item: join(predicate(item) for predicate in operands)

    def negation(self) -> Predicate:
        if self.accept("kw", "NOT"):
            inner = self.negation()
            return lambda item: not inner(item)
        return self.comparison()

    def comparison(self) -> Predicate:
        token = self.peek()
        if token == ("op", "("):
            self.take()
            inner = self.condition()
            self.take("op", ")")
            return inner
        if token is not None and token[0] == "word" and token[1] in _FUNCTIONS:
            return self.function()
        left = self.operand()
        token = self.peek()
        if token == ("kw", "BETWEEN"):
            self.take()
            low = self.operand()
            self.take("kw", "AND")
            high = self.operand()

            def between(item: Item) -> bool:
                x, lo, hi = left(item), low(item), high(item)
                a, b = _comparable(x, lo), _comparable(x, hi)
                return a is not None and b is not None and a[0] >= a[1] and b[0] <= b[1]

            return between
        if token == ("kw", "IN"):
            self.take()
            self.take("op", "(")
            options = [self.operand()]
            while self.accept("op", ","):
                options.append(self.operand())
            self.take("op", ")")
            return lambda item: any(_equal(left(item), o(item)) for o in options)
        op = self.take("op")[1]
        right = self.operand()
        if op == "=":
            return lambda item: _equal(left(item), right(item))
        if op == "<>":
            return lambda item: left(item) is not None and not _equal(left(item), right(item))
        if op not in _COMPARE:
            raise ExpressionError(f"Invalid expression: {op!r} is not a comparator")
        compare = _COMPARE[op]

        def compared(item: Item) -> bool:
            pair = _comparable(left(item), right(item))
            return pair is not None and compare(*pair)

        return compared

    def function(self) -> Predicate:
        name = self.take("word")[1]
        self.take("op", "(")
        if name in ("attribute_exists", "attribute_not_exists"):
            path = self.path()
            self.take("op", ")")
            exists = name == "attribute_exists"
            return lambda item: (path in item) is exists
        first = self.operand()
        self.take("op", ",")
        second = self.operand()
        self.take("op", ")")
        if name == "begins_with":

            def begins(item: Item) -> bool:
                pair = _comparable(first(item), second(item))
                return pair is not None and isinstance(pair[0], str | bytes) and pair[0].startswith(pair[1])

            return begins
        if name == "contains":

            def contains(item: Item) -> bool:
                haystack, needle = first(item), second(item)
                if haystack is None or needle is None:
                    return False
                kind, content = next(iter(haystack.items()))
                if kind in ("S", "B"):
                    pair = _comparable(haystack, needle)
                    return pair is not None and pair[1] in pair[0]
                if kind == "L":
                    return any(_equal(v, needle) for v in content)
                if kind in ("SS", "NS", "BS"):
                    return next(iter(needle.values())) in content
                return False

            return contains
        # attribute_type(path, :type)
        return lambda item: (v := first(item)) is not None and (t := second(item)) is not None and t.get("S") in v

    def operand(self) -> Operand:
        token = self.peek()
        if token is not None and token[0] == "value":
            self.take()
            value = self.value(token[1])
            return lambda item: value
        if token == ("word", "size"):
            self.take()
            self.take("op", "(")
            inner = self.operand()
            self.take("op", ")")

            def size(item: Item) -> Value | None:
                v = inner(item)
                if v is None:
                    return None
                kind, content = next(iter(v.items()))
                if kind in ("S", "B", "L", "M", "SS", "NS", "BS"):
                    return {"N": str(len(content))}
                return None

            return size
        path = self.path()
        return lambda item: item.get(path)


_FUNCTIONS = {"attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains"}


def compile_condition(
    text: str, names: Mapping[str, str] | None = None, values: Mapping[str, Value] | None = None
) -> Predicate:
    """A condition (or key condition, or filter) as a predicate on an item."""
    parser = _Parser(_tokens(text), names or {}, values or {})
    predicate = parser.condition()
    parser.done()
    return predicate


def _add(a: Value | None, b: Value | None, sign: int) -> Value:
    if a is None or b is None or "N" not in a or "N" not in b:
        raise ExpressionError("An operand in the update expression has an incorrect data type")
    return {"N": _format(Decimal(a["N"]) + sign * Decimal(b["N"]))}


def _format(number: Decimal) -> str:
    text = format(number.normalize(), "f")
    return text if text != "-0" else "0"


def apply_update(
    item: Item, text: str, names: Mapping[str, str] | None = None, values: Mapping[str, Value] | None = None
) -> Item:
    """The item after an update expression (a new dict; ``item`` is left as it was)."""
    parser = _Parser(_tokens(text), names or {}, values or {})
    actions: list[Callable[[Item, Item], None]] = []
    seen_clause = False
    while parser.peek() is not None:
        clause = parser.take("kw")[1]
        seen_clause = True
        while True:
            actions.append(_update_action(parser, clause))
            if not parser.accept("op", ","):
                break
    if not seen_clause:
        raise ExpressionError("Invalid UpdateExpression: the expression can not be empty")
    new = dict(item)
    for action in actions:
        action(item, new)  # operands read the item as it was before the update, as DynamoDB does
    return new


def _update_action(parser: _Parser, clause: str) -> Callable[[Item, Item], None]:
    if clause == "REMOVE":
        path = parser.path()

        def remove(old: Item, new: Item) -> None:
            new.pop(path, None)

        return remove
    if clause == "ADD":
        path = parser.path()
        value = parser.value(parser.take("value")[1])

        def add(old: Item, new: Item) -> None:
            new[path] = _add(old.get(path, {"N": "0"}), value, 1) if "N" in value else value

        return add
    if clause != "SET":
        raise ExpressionError(f"Invalid UpdateExpression: {clause} is not supported here")
    path = parser.path()
    parser.take("op", "=")
    first = _set_operand(parser)
    token = parser.peek()
    if token in (("op", "+"), ("op", "-")):
        parser.take()
        sign = 1 if token == ("op", "+") else -1
        second = _set_operand(parser)

        def arithmetic(old: Item, new: Item) -> None:
            new[path] = _add(first(old), second(old), sign)

        return arithmetic

    def assign(old: Item, new: Item) -> None:
        value = first(old)
        if value is None:
            raise ExpressionError("The provided expression refers to an attribute that does not exist in the item")
        new[path] = value

    return assign


def _set_operand(parser: _Parser) -> Operand:
    token = parser.peek()
    if token == ("word", "if_not_exists"):
        parser.take()
        parser.take("op", "(")
        path = parser.path()
        parser.take("op", ",")
        fallback = _set_operand(parser)
        parser.take("op", ")")
        return lambda item: item.get(path) or fallback(item)
    if token == ("word", "list_append"):
        parser.take()
        parser.take("op", "(")
        a = _set_operand(parser)
        parser.take("op", ",")
        b = _set_operand(parser)
        parser.take("op", ")")

        def append(item: Item) -> Value:
            x, y = a(item), b(item)
            if x is None or y is None or "L" not in x or "L" not in y:
                raise ExpressionError("An operand in the update expression has an incorrect data type")
            return {"L": [*x["L"], *y["L"]]}

        return append
    return parser.operand()

"""The `where` of an aggregate query: our own tokenizer and parser, into an AST.

The language (gaps.md, Aggregate query): comparisons `= != <> > >= < <=` between column
names, numbers and single-quoted strings (`''` is a quote inside one), combined with
`AND`, `OR`, `NOT` (any case) and parentheses. Nothing else is a token, so nothing else
can be written: the engine compiles the AST with its own quoted identifiers and bound
parameters (`adapters/answers/health_queries.py`), and no text of a caller is ever SQL.

A malformed expression raises `WhereSyntaxError` naming the position (1-based, in
characters) where reading stopped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Literal

# Generous for a filter, small enough that parsing costs nothing.
MAX_WHERE_LENGTH = 2000
# Parentheses and NOTs nest at most this deep: the parser recurses, and Python's stack
# must never be the limit a caller finds.
MAX_DEPTH = 32

Operator = Literal["=", "!=", "<", "<=", ">", ">="]
Scalar = str | int | float | bool


class WhereSyntaxError(ValueError):
    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.message = message
        self.position = position  # 1-based, in characters of the where text


@dataclass(frozen=True)
class Column:
    name: str
    position: int


@dataclass(frozen=True)
class Literal_:
    # As written (str, int, float, bool); once typed for a column, a date or datetime.
    value: Scalar | date
    position: int


Operand = Column | Literal_


@dataclass(frozen=True)
class Comparison:
    left: Operand
    op: Operator
    right: Operand


@dataclass(frozen=True)
class Not:
    operand: Expression


@dataclass(frozen=True)
class And:
    operands: tuple[Expression, ...]


@dataclass(frozen=True)
class Or:
    operands: tuple[Expression, ...]


Expression = Comparison | Not | And | Or


@dataclass(frozen=True)
class Token:
    kind: Literal["name", "number", "string", "op", "(", ")", "and", "or", "not", "bool", "end"]
    text: str
    value: Scalar | None
    position: int


_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<string>'(?:[^']|'')*')
    | (?P<op>!=|<>|>=|<=|=|>|<)
    | (?P<paren>[()])
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and": "and", "or": "or", "not": "not"}
_BOOLEANS = {"true": True, "false": False}


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_WHERE_LENGTH:
        raise WhereSyntaxError(
            f"the expression is longer than {MAX_WHERE_LENGTH} characters", MAX_WHERE_LENGTH + 1
        )
    tokens: list[Token] = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            if text[at] == "'":
                raise WhereSyntaxError("unterminated string", at + 1)
            raise WhereSyntaxError(f"unexpected character {text[at]!r}", at + 1)
        kind, piece, position = match.lastgroup, match.group(), at + 1
        at = match.end()
        if kind == "space":
            continue
        if kind == "number":
            # An integer too long for a 64-bit column compares as a float (inf if need
            # be): the engine binds it, and Python's int() refuses very long digit runs.
            digits = piece.lstrip("-")
            whole = not any(c in piece for c in ".eE") and len(digits) <= 18
            number = int(piece) if whole else float(piece)
            tokens.append(Token("number", piece, number, position))
        elif kind == "name":
            lower = piece.lower()
            if lower in _KEYWORDS:
                tokens.append(Token(_KEYWORDS[lower], piece, None, position))  # type: ignore[arg-type]
            elif lower in _BOOLEANS:
                tokens.append(Token("bool", piece, _BOOLEANS[lower], position))
            else:
                tokens.append(Token("name", piece, None, position))
        elif kind == "string":
            tokens.append(Token("string", piece, piece[1:-1].replace("''", "'"), position))
        elif kind == "op":
            tokens.append(Token("op", "!=" if piece == "<>" else piece, None, position))
        else:
            tokens.append(Token(piece, piece, None, position))  # type: ignore[arg-type]
    tokens.append(Token("end", "", None, len(text) + 1))
    return tokens


def parse(text: str) -> Expression:
    """The AST of a where expression; `WhereSyntaxError` if it is not one."""
    parser = _Parser(tokenize(text))
    if parser.peek().kind == "end":
        raise WhereSyntaxError("the expression is empty", 1)
    expression = parser.disjunction(0)
    token = parser.peek()
    if token.kind != "end":
        raise WhereSyntaxError(f"unexpected {_describe(token)}", token.position)
    return expression


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        if token.kind != "end":
            self.at += 1
        return token

    def disjunction(self, depth: int) -> Expression:
        operands = [self.conjunction(depth)]
        while self.peek().kind == "or":
            self.take()
            operands.append(self.conjunction(depth))
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def conjunction(self, depth: int) -> Expression:
        operands = [self.negation(depth)]
        while self.peek().kind == "and":
            self.take()
            operands.append(self.negation(depth))
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def negation(self, depth: int) -> Expression:
        token = self.peek()
        if depth >= MAX_DEPTH:
            raise WhereSyntaxError(f"nested deeper than {MAX_DEPTH} levels", token.position)
        if token.kind == "not":
            self.take()
            return Not(self.negation(depth + 1))
        if token.kind == "(":
            self.take()
            inner = self.disjunction(depth + 1)
            closing = self.take()
            if closing.kind != ")":
                raise WhereSyntaxError(
                    f"expected ')' but found {_describe(closing)}", closing.position
                )
            return inner
        return self.comparison()

    def comparison(self) -> Comparison:
        left = self.operand()
        token = self.take()
        if token.kind != "op":
            raise WhereSyntaxError(
                f"expected a comparison operator but found {_describe(token)}", token.position
            )
        right = self.operand()
        return Comparison(left, token.text, right)  # type: ignore[arg-type]

    def operand(self) -> Operand:
        token = self.take()
        if token.kind == "name":
            return Column(token.text, token.position)
        if token.kind in ("number", "string", "bool"):
            assert token.value is not None
            return Literal_(token.value, token.position)
        raise WhereSyntaxError(
            f"expected a column name, a number or a string but found {_describe(token)}",
            token.position,
        )


def _describe(token: Token) -> str:
    if token.kind == "end":
        return "the end of the expression"
    return f"{token.text!r}"


def columns_of(expression: Expression) -> list[Column]:
    """Every column the expression names, in reading order."""
    if isinstance(expression, Comparison):
        return [side for side in (expression.left, expression.right) if isinstance(side, Column)]
    if isinstance(expression, Not):
        return columns_of(expression.operand)
    return [column for operand in expression.operands for column in columns_of(operand)]

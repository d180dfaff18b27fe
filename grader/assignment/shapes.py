"""Shape expressions: `B * T * max(3 * C, NH * T)` over a case's parameters, evaluated safely."""

from __future__ import annotations

import ast
import functools
import math
import operator
from typing import Any, Callable

from grader.assignment.model import Buffer
from grader.threadsafe import parse_expression

_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,  # sizes are integers: C / NH means the head size
}
_FUNCTIONS: dict[str, Callable[..., int]] = {"max": max, "min": min}


@functools.lru_cache(maxsize=None)
def _parsed(expression: str) -> ast.Expression:
    return parse_expression(expression)  # batches evaluate shapes in several threads at once


def evaluate(expression: str, params: dict[str, Any]) -> int:
    """Evaluate a shape expression such as `B * T * max(3 * C, NH * T)` over a case's parameters."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in params:
                raise KeyError(node.id)
            return int(params[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
            return _FUNCTIONS[node.func.id](*(walk(a) for a in node.args))
        raise ValueError(f"unsupported element {ast.dump(node)[:40]}")

    return walk(_parsed(expression))


def shape_of(buffer: Buffer, params: dict[str, Any]) -> tuple[int, ...]:
    return tuple(evaluate(e, params) for e in buffer.shape)


def allocation_of(buffer: Buffer, params: dict[str, Any]) -> int:
    """Elements to allocate: the shape's size, or the spec's larger `allocate` expression."""
    size = math.prod(shape_of(buffer, params))
    return max(size, evaluate(buffer.allocate, params)) if buffer.allocate else size


def named_axes(buffer: Buffer, params: dict[str, Any]) -> tuple[tuple[str | None, int], ...]:
    """The buffer's axes as its shape names them, an axis that is a product split into its factors, each factor with
    the parameter that is its extent (None: one no single parameter is): "N, d" gives (("N", 37), ("d", 24)),
    "batch * (prompt_len + new_tokens)" gives (("batch", 2), (None, 12)). Row-major, as the buffer is laid out."""
    axes: list[tuple[str | None, int]] = []
    for expression in buffer.shape:
        for factor in _factors(_parsed(expression).body):
            name = factor.id if isinstance(factor, ast.Name) else None
            axes.append((name, evaluate(ast.unparse(factor), params)))
    return tuple(axes)


def _factors(node: ast.AST) -> list[ast.AST]:
    """The terms of a product, left to right (a * b * c is (a * b) * c); any other expression is one term."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]

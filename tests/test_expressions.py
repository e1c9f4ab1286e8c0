"""The one expression evaluator: C's arithmetic for kernel code, Python's for pragmas, never eval."""

from __future__ import annotations

import ast

import pytest

from kernelcast.kernels_runtime.source import expressions
from kernelcast.kernels_runtime.source.expressions import C, ExpressionError, UnboundName, evaluate, parse_c
from kernelcast.kernels_runtime.source.launch_spec import LaunchSpecError, parse_launch_pragma

PYTHON = expressions.Dialect(expressions.PYTHON_BINARY, expressions.PYTHON_UNARY, {"cdiv": expressions.cdiv}, limit=2**62)


@pytest.mark.parametrize(
    "text, c_value, python_value",
    [
        ("-7 / 2", -3, -3.5),  # C truncates toward zero; Python divides exactly
        ("-7 % 3", -1, 2),  # C keeps the dividend's sign; Python floors
        ("cdiv(1 << 20, 32)", None, 32768),
        ("(1 << 20) + 31 >> 5", 32768, 32768),
    ],
)
def test_c_and_python_arithmetic_differ_where_the_languages_do(text: str, c_value: int | None, python_value: float) -> None:
    tree = ast.parse(text, mode="eval").body
    assert evaluate(tree, {}, PYTHON) == python_value
    if c_value is None:
        with pytest.raises(ExpressionError):
            evaluate(tree, {}, C)  # C has no cdiv; Triton text's dialect adds it
    else:
        assert evaluate(tree, {}, C) == c_value


def test_c_text_reads_casts_suffixes_builtins_and_conditionals() -> None:
    names = {"n": 1000, "blockDim_x": 256, "threadIdx_x": 3}
    assert evaluate(parse_c("(long long)n * 4ULL + threadIdx.x"), names, C) == 4003
    assert evaluate(parse_c("n > blockDim.x ? blockDim.x : n"), names, C) == 256
    assert evaluate(parse_c("min(n, 512u) & ~1"), names, C) == 512


def test_errors_name_what_has_no_value_and_where() -> None:
    tree = ast.parse("1 + width", mode="eval").body
    with pytest.raises(UnboundName) as unbound:
        evaluate(tree, {}, C)
    assert unbound.value.name == "width" and unbound.value.column == 4
    for text in ("x / 0", "x ** 2", "open('f')", "x.y", "[x]"):
        with pytest.raises(ExpressionError):
            evaluate(parse_c(text), {"x": 3}, C)
    with pytest.raises(ExpressionError, match="beyond any GPU's sizes"):
        evaluate(ast.parse("2 ** 62 * 4", mode="eval").body, {}, PYTHON)


def test_text_that_is_not_an_expression_is_an_error_not_a_crash() -> None:
    for text in ("(" * 5000 + "1" + ")" * 5000, "a ? b", "__import__('os').system('x')", ""):
        with pytest.raises(ExpressionError):
            evaluate(parse_c(text), {}, C)


def test_the_pragma_reports_evaluator_errors_at_their_column() -> None:
    with pytest.raises(LaunchSpecError) as caught:
        parse_launch_pragma("// kernelcast: launch grid=(cdiv(N, 0)) block=(256) args=(x:f32[8], N:i32=8)")
    assert caught.value.message == "division by zero in cdiv" and caught.value.column == 28

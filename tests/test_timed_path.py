"""The timed call of a Python side: functions it never reaches, host loops that launch once a trip, kernels it builds anew."""

from __future__ import annotations

import textwrap

from kernelcast.kernels_runtime.source.timed_path import (
    GUESSED_CONFIGS,
    GUESSED_TRIPS,
    MAX_REPEATS,
    kernels_built_each_call,
    line_repeats,
    unreached_spans,
)
from kernelcast.models.embedded.features import AUTOTUNE_CONFIG_US, DEFINED_IN_CALL_US, read_code

RECURRENT = textwrap.dedent(
    """
    import torch
    import torch.nn as nn

    B, T, D = 4, {steps}, 64


    def recurrence(x, w):
        state = torch.zeros_like(x[:, 0])
        out = torch.empty_like(x)
        for t in range(T):
            state = torch.tanh(torch.matmul(state, w) + x[:, t])
            out[:, t] = state.clone()
        return out


    def chunked(x, w):
        return torch.cumsum(x, dim=1).softmax(-1).sigmoid()


    def check():
        return chunked(torch.randn(2, 2, 2), torch.randn(2, 2))


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(D, D))

        def forward(self, x):
            return recurrence(x, self.w)


    def get_inputs():
        return [torch.randn(B, T, D)]


    if __name__ == "__main__":
        print(check())
    """
)


def _lines_of(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[start:end].strip().splitlines()[0] for start, end in spans]


def test_functions_the_timed_call_never_reaches_are_found_and_the_rest_kept() -> None:
    text = RECURRENT.format(steps=16)
    # `chunked` is named only by `check`, which only the `__main__` guard calls: neither runs in a timed call.
    assert sorted(_lines_of(text, unreached_spans(text))) == ["def check():", "def chunked(x, w):"]


def test_a_file_without_a_kernelbench_model_keeps_all_its_functions() -> None:
    assert unreached_spans("def helper(x):\n    return x.sum()\n") == []
    assert line_repeats("def helper(x):\n    for i in range(8):\n        x = x.sum()\n    return x\n") == {}


def test_lines_in_a_host_loop_run_once_a_trip_through_the_helpers_forward_calls() -> None:
    text = RECURRENT.format(steps=512)
    lines = text.splitlines()
    repeats = line_repeats(text)
    looped = {"state = torch.tanh(torch.matmul(state, w) + x[:, t])", "out[:, t] = state.clone()"}
    assert {lines[number - 1].strip() for number in repeats} == looped
    assert set(repeats.values()) == {512.0}


def test_nested_loops_and_methods_multiply_and_an_unfixed_bound_reads_as_the_median_size() -> None:
    text = textwrap.dedent(
        """
        import torch.nn as nn
        batch, features, layers = 8, 1024, 3

        class ModelNew(nn.Module):
            def step(self, x):
                for _ in range(x.shape[0]):
                    x = x.relu()
                return x

            def forward(self, x):
                for layer in range(layers):
                    x = self.step(x)
                for block in self.blocks:
                    x = block(x)
                return x
        """
    )
    repeats = line_repeats(text)
    by_line = {text.splitlines()[number - 1].strip(): runs for number, runs in repeats.items()}
    # 3 layers, each going round a loop whose bound is a run-time size: the median of 8, 1024 and 3 is 8.
    assert by_line["x = x.relu()"] == 3 * 8
    assert by_line["x = self.step(x)"] == 3
    assert "x = block(x)" not in by_line  # a loop over a module list counts once


def test_an_unfixed_bound_without_size_constants_is_the_default_guess() -> None:
    text = "class Model:\n    def forward(self, x, n):\n        for i in range(n):\n            x = x.exp()\n        return x\n"
    assert line_repeats(text) == {4: float(GUESSED_TRIPS)}


def test_the_torch_ops_in_a_loop_count_once_a_trip_and_dead_functions_not_at_all() -> None:
    short, long = (read_code(RECURRENT.format(steps=steps), "pytorch") for steps in (4, 1024))
    assert long["torch_elementwise"] / short["torch_elementwise"] > 100  # tanh a step
    assert long["torch_heavy"] == 1024  # `torch.matmul(state, w)` a step
    assert short["torch_scan"] == 0  # `chunked`'s cumsum is never called


def test_text_that_does_not_parse_reads_as_written() -> None:
    half_typed = "class Model:\n    def forward(self, x):\n        for i in range(4):\n            x = x.exp(\n"
    assert line_repeats(half_typed) == {}
    assert unreached_spans(half_typed) == []
    assert read_code(half_typed, "pytorch")["torch_elementwise"] == 1


BUILT_IN_CALL = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def once(x_ptr, n, BLOCK: tl.constexpr):
        pass


    def softplus(x):
        configs = [triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512}), triton.Config({"BLOCK": 1024})]

        @triton.autotune(configs=configs, key=["n"])
        @triton.jit
        def tuned(x_ptr, n, BLOCK: tl.constexpr):
            pass

        @triton.autotune(configs=[triton.Config({"BLOCK": 256})], key=["n"])
        @triton.jit
        def single(x_ptr, n, BLOCK: tl.constexpr):
            pass

        @triton.jit
        def plain(x_ptr, n, BLOCK: tl.constexpr):
            pass

        tuned[(1,)](x, x.numel())
        return x
    """
)


def test_kernels_defined_inside_a_function_are_built_each_call_and_autotuners_time_their_configs() -> None:
    # The module-level kernel is built once; of those defined in `softplus`, only the autotuner of three configs times them.
    assert sorted(kernels_built_each_call(BUILT_IN_CALL)) == [0, 0, 3]
    assert kernels_built_each_call(BUILT_IN_CALL.replace("configs=configs", "configs=make_configs()")) == [GUESSED_CONFIGS, 0, 0]
    assert read_code(BUILT_IN_CALL, "triton")["built_us"] == 3 * DEFINED_IN_CALL_US + 3 * AUTOTUNE_CONFIG_US
    assert kernels_built_each_call("def f(:\n") == []


def test_helpers_calling_helpers_from_many_places_are_walked_once_each() -> None:
    levels, sites = 3, 60
    helpers = [f"def helper{level}(x):\n" + f"    x = helper{level + 1}(x)\n" * sites + "    return x\n" for level in range(levels)]
    leaf = f"def helper{levels}(x):\n    for i in range(8):\n        x = x.exp()\n    return x\n"
    model = "class Model:\n    def forward(self, x):\n" + "        x = helper0(x)\n" * sites + "        return x\n"
    text = "\n".join([*helpers, leaf, model])
    # Walked once a call site, this would be 60**4 walks; once a helper, the leaf's loop is found at once.
    assert set(line_repeats(text).values()) == {8.0}


def test_loops_nested_past_a_floats_range_stay_finite() -> None:
    depth = 20  # 20 loops of 2**16 trips each would be 2**320 runs, past a float's range
    body = "".join("    " * (2 + level) + f"for i{level} in range(1 << 20):\n" for level in range(depth))
    text = "class Model:\n    def forward(self, x):\n" + body + "    " * (2 + depth) + "x = x.exp()\n        return x\n"
    assert max(line_repeats(text).values()) == MAX_REPEATS
    assert read_code(text, "pytorch")["torch_elementwise"] == MAX_REPEATS

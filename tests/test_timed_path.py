"""The timed call of a Python side: functions it never reaches, host loops that launch once a trip, kernels it builds anew,
kernels an autotuner runs at their best config."""

from __future__ import annotations

import ast
import textwrap

import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.kernels_runtime.source.host_values import parse_module
from kernelcast.kernels_runtime.source.launch_spec import kernelbench_input_shapes
from kernelcast.kernels_runtime.source.timed_path import (
    GUESSED_CONFIGS,
    GUESSED_TRIPS,
    MAX_REPEATS,
    calls_out_of_sight,
    guessed_trips,
    kernels_built_each_call,
    line_repeats,
    names_imported_in_class,
    tuned_share,
    unreached_spans,
    with_sizes_known_at,
)
from kernelcast.models.embedded.features import (
    AUTOTUNE_CONFIG_US,
    AUTOTUNE_GAIN_LOG2,
    DEFINED_IN_CALL_US,
    SIDE_NAMES,
    kernels_out_of_sight,
    pair_features,
    read_code,
)
from kernelcast.wire import ForecastRequest, KernelSide

HARDWARE = SPECS["H100-SXM"].to_json()

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


def _repeats_by_line(text: str) -> dict[str, float]:
    """How many times one timed call runs each line that runs more than once, by the line's text."""
    return {text.splitlines()[number - 1].strip(): runs for number, runs in line_repeats(text).items()}


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
    repeats = _repeats_by_line(RECURRENT.format(steps=512))
    looped = {"state = torch.tanh(torch.matmul(state, w) + x[:, t])", "out[:, t] = state.clone()"}
    assert set(repeats) == looped
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
    by_line = _repeats_by_line(text)
    # 3 layers, each going round a loop whose bound is a run-time size: the median of 8, 1024 and 3 is 8.
    assert by_line["x = x.relu()"] == 3 * 8
    assert by_line["x = self.step(x)"] == 3
    assert "x = block(x)" not in by_line  # a loop over a module list counts once


def test_a_loop_over_a_list_the_text_writes_out_runs_once_an_item() -> None:
    """A forward that times its own configs each call (seen in LLM-written Triton, 22x slower than
    eager): the launches in `for config in configs:` run once a config, not once."""
    text = textwrap.dedent(
        """
        import torch.nn as nn
        import triton

        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            pass

        def tuned(x):
            configs = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})]
            for config in configs:
                k[(1,)](x, **config.kwargs)
            for index, scale in enumerate((1, 2)):
                x = x * scale
            for part in [*configs, None]:
                x = x + 1
            return x

        class ModelNew(nn.Module):
            def forward(self, x):
                return tuned(x)
        """
    )
    by_line = _repeats_by_line(text)
    assert by_line["k[(1,)](x, **config.kwargs)"] == 3 and by_line["x = x * scale"] == 2
    assert "x = x + 1" not in by_line  # a starred item: its length is the run's to say
    assert read_code(text, "triton")["triton_launch_sites"] == 3


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


ROW_SUM = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    CONFIGS
    @triton.jit
    def row_sum(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        total = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            total += tl.load(x_ptr + row * cols + offsets, mask=offsets < cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(total, axis=0))


    @triton.jit
    def scale(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


    class ModelNew(nn.Module):
        def forward(self, x):
            out = torch.empty(x.shape[0], device=x.device)
            row_sum[(x.shape[0],)](x, out, x.shape[1], LAUNCH)
            scale[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
            return out


    batch_size = 4096
    dim = 65536


    def get_inputs():
        return [torch.randn(batch_size, dim)]
    """
)
TUNED = "@triton.autotune(configs=[triton.Config({'BLOCK': 1024}), triton.Config({'BLOCK': 4096})], key=['cols'])"
ONE_CONFIG = "@triton.autotune(configs=[triton.Config({'BLOCK': 1024})], key=['cols'])"


def _row_sum(configs: str) -> str:
    return ROW_SUM.replace("CONFIGS", configs).replace(", LAUNCH", "" if configs else ", BLOCK=1024")


def test_an_autotuner_over_several_configs_runs_its_best_and_the_floor_of_a_reducing_side_drops() -> None:
    # One of the two kernels is tuned over two configs; one config is launched as written.
    assert tuned_share(_row_sum(TUNED)) == 0.5
    assert tuned_share(_row_sum(ONE_CONFIG)) == tuned_share(_row_sum("")) == 0.0
    assert tuned_share("def f(:\n@triton.autotune") == 0.0
    sizes = {"batch_size": 4096, "dim": 65536}
    memory = SIDE_NAMES.index("memory_log2_us")

    def memory_log2_us(reference: str, candidate: str) -> tuple[float, float]:
        rows = pair_features(ForecastRequest(KernelSide(reference, "triton"), KernelSide(candidate, "triton"), HARDWARE, sizes))
        return float(rows[0, memory]), float(rows[1, memory])

    fixed, tuned = memory_log2_us(_row_sum(""), _row_sum(TUNED))
    assert fixed - tuned == pytest.approx(AUTOTUNE_GAIN_LOG2 * 0.5, abs=0.01)
    assert memory_log2_us(_row_sum(""), _row_sum(ONE_CONFIG))[1] == fixed
    # Elementwise kernels run at bandwidth at every block size: tuning them gains nothing the floor reads.
    elementwise = _row_sum(TUNED).replace("tl.sum(total, axis=0)", "total")
    assert len(set(memory_log2_us(elementwise.replace(TUNED, ""), elementwise))) == 1


LIBRARY_ENTRY = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    from fastlib.utils import pointwise_dynamic, tile_helper
    from fastlib.ops.softplus import softplus_fwd


    @pointwise_dynamic(promotion="DEFAULT")
    def softplus_func(x):
        return tile_helper(x)


    def softplus(x):
        return softplus_func(x)


    def unused(x):
        return softplus_fwd(x)


    class Softplus(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return softplus(x)

        @staticmethod
        @torch.compiler.disable
        def backward(ctx, grad):
            return grad


    from fastlib.ops.softplus import softplus as library_op


    class ModelNew(nn.Module):
        def forward(self, x):
            return library_op(x)
    """
)


def test_calls_into_a_library_are_out_of_sight_unless_the_file_shows_what_they_call() -> None:
    # A decorator and the calls inside the function it decorates are the kernel the file shows, and
    # the shown `softplus` imported as `library_op` is in sight: only `softplus_fwd` is not.
    assert calls_out_of_sight(LIBRARY_ENTRY) == ("softplus_fwd (fastlib.ops.softplus)",)
    # Read from the timed text, with the functions the call never reaches blanked, the whole file still says what it shows.
    timed = LIBRARY_ENTRY.replace("def softplus(x):\n    return softplus_func(x)", " " * 43)
    assert calls_out_of_sight(timed) == ("library_op (fastlib.ops.softplus)", "softplus_fwd (fastlib.ops.softplus)")
    assert calls_out_of_sight(timed, LIBRARY_ENTRY) == ("softplus_fwd (fastlib.ops.softplus)",)
    relative = "from .kernels import fused\nimport fastlib.ops as ops\nimport math\nfused(x)\nops.add(x)\ntorch.relu(x)\nmath.sqrt(2)\n"
    assert calls_out_of_sight(relative) == ("fused (.kernels)", "ops.add (fastlib.ops)")
    assert calls_out_of_sight("import fastlib\ndef f(:\n") == ()


def test_the_names_a_class_imports_from_another_package_count_even_where_its_module_is_copied_in() -> None:
    # LIBRARY_ENTRY's ModelNew calls `library_op`, imported from the library whose module is copied above:
    # in sight for the launches, yet the class wraps a library's entry point.
    assert names_imported_in_class(LIBRARY_ENTRY, "ModelNew") == ("library_op",)
    own = (
        "import math\nimport torch.nn as nn\ndef add(x):\n    return x\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return add(x) * math.pi\n"
    )
    assert names_imported_in_class(own, "ModelNew") == ()  # the frameworks' and the standard library's names do not count
    assert names_imported_in_class("from .kernels import fused\n" + own.replace("add(x) *", "fused(x) *"), "ModelNew") == ("fused",)
    assert names_imported_in_class(own, "Model") == ()
    assert names_imported_in_class("class ModelNew(:\n", "ModelNew") is None


CHUNKED = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    from fastlib.ops.delta import chunk_fwd


    class ChunkFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q):
            return chunk_fwd(torch.empty_like(q), q)

        @staticmethod
        @torch.compiler.disable
        def backward(ctx, grad):
            return grad


    class ModelNew(nn.Module):
        def forward(self, q):
            return ChunkFunction.apply(q)
    """
)


def test_a_side_that_only_calls_into_a_library_has_its_kernels_out_of_sight() -> None:
    # Its decorated `backward` is cut with its decorators: left behind, they broke the parse, and
    # with it every reader of the timed call.
    assert kernels_out_of_sight(CHUNKED, "triton") == ("chunk_fwd (fastlib.ops.delta)",)
    # Work of its own in sight (a torch op that computes, a kernel of its own): the side is read as it is.
    assert kernels_out_of_sight(CHUNKED.replace("return chunk_fwd(", "return torch.relu(q) + chunk_fwd("), "triton") == ()
    assert (
        kernels_out_of_sight(
            _row_sum(TUNED)
            .replace("import torch\n", "import torch\nfrom fastlib import prep\n")
            .replace("out = torch", "x = prep(x)\n        out = torch"),
            "triton",
        )
        == ()
    )
    assert kernels_out_of_sight(_row_sum(""), "triton") == ()


NAIVE_RECURRENCE = textwrap.dedent(
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    B, T, H, D = 4, 2048, 16, 128


    def recurrent(q, k, gate, scale=None):
        q, k, gate = map(lambda x: x.transpose(1, 2).float(), (q, k, gate))
        b, h, steps, d, e = *k.shape, q.shape[-1]
        state = torch.zeros(b, h, d, e)
        out = torch.zeros_like(q)
        for i in range(steps):
            state = state * gate[:, :, i, None].exp() + k[:, :, i, :, None] * q[:, :, i, None, :]
            out[:, :, i] = state.sum(-2)
        for j in range(0, d, 32):
            out = out + 0
        return out


    class Model(nn.Module):
        def forward(self, q, k, gate):
            q, k, gate = (tensor.contiguous() for tensor in (q, k, gate))
            return recurrent(q, k, gate=gate)


    def get_inputs():
        q = F.normalize(torch.randn(B, T, H, D), p=2, dim=-1)
        k = torch.randn(B, T, H, D).sigmoid()
        return [q, k, F.logsigmoid(torch.randn(B, T, H))]
    """
)


def test_a_loop_over_a_size_read_from_an_input_runs_that_size_followed_from_get_inputs() -> None:
    text = NAIVE_RECURRENCE
    by_line = _repeats_by_line(text)
    # T steps (2048), read through forward, map(lambda ...transpose(1, 2)) and `*k.shape`; not 128, the
    # median of the file's size constants, as an unfollowed bound reads.
    assert by_line["out[:, :, i] = state.sum(-2)"] == 2048
    assert by_line["out = out + 0"] == 128 / 32  # d is D, stepped by 32
    assert not guessed_trips(text)
    # Without get_inputs the sizes are not known and the bound is guessed as before.
    unknown = text.split("def get_inputs")[0]
    assert set(line_repeats(unknown).values()) == {128.0} and guessed_trips(unknown)


def test_an_autograd_functions_forward_is_walked_through_apply_though_it_shares_the_models_name() -> None:
    # Both are `forward`: walked by name alone, `Scan.forward` read as the model's own calling itself.
    text = textwrap.dedent(
        """
        import torch
        import torch.nn as nn


        class Scan(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = x.clone()
                for t in range(1, x.shape[1]):
                    out[:, t] = out[:, t - 1] + x[:, t]
                return out


        class Model(nn.Module):
            def forward(self, x):
                return Scan.apply(x)


        def get_inputs():
            return [torch.randn(8, 512)]
        """
    )
    assert _repeats_by_line(text)["out[:, t] = out[:, t - 1] + x[:, t]"] == 511
    assert not guessed_trips(text)


def test_get_inputs_shapes_keep_their_places_and_look_through_calls_that_keep_a_shape() -> None:
    text = NAIVE_RECURRENCE.replace("return [q, k,", "return [q, k, torch.tensor([1, 2]), 3 * k,")
    assert kernelbench_input_shapes(text) == [(4, 2048, 16, 128), (4, 2048, 16, 128), None, (4, 2048, 16, 128), (4, 2048, 16)]


def test_sums_and_method_chains_deeper_than_the_stack_are_read_and_a_bound_that_deep_is_guessed() -> None:
    def with_line(line: str) -> str:
        return NAIVE_RECURRENCE.replace("    out = torch.zeros_like(q)\n", f"    out = torch.zeros_like(q)\n    {line}\n")

    # Thousands of terms, or of chained casts, nest deeper than Python's stack (both still parse).
    for line in ("k = k + " + " + ".join(["k"] * 1500), "k = k" + ".float()" * 1200):
        text = with_line(line)
        assert parse_module(text) is not None
        assert set(line_repeats(text).values()) == {2048.0, 4.0} and not guessed_trips(text)
    # A loop bound that deep is not one the text fixes: guessed, as the evaluator of bounds reads it.
    text = with_line("for j in range(steps" + " + 0" * 1500 + "):\n        out = out * 2")
    assert parse_module(text) is not None and guessed_trips(text)


TUTORIAL_SCRIPT = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    DEVICE = torch.device("cuda")


    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


    def add(x, y):
        output = torch.empty_like(x)
        n_elements = output.numel()
        add_kernel[(triton.cdiv(n_elements, 1024),)](x, y, output, n_elements, BLOCK_SIZE=1024)
        return output


    def rows(m):
        return max(m.shape[0], 1)


    torch.manual_seed(0)
    size = 98432
    x = torch.rand(size, device=DEVICE)
    y = torch.rand(size, device=DEVICE)
    output_triton = add(x, y)

    if __name__ == "__main__":
        M, N = 1823, 781
        m = torch.randn((M, N), device=DEVICE).half()
        print(rows(m))
    """
)


def _known_at(text: str, marker: str, expression: str) -> str:
    line = next(number for number, content in enumerate(text.splitlines(), 1) if marker in content)
    return ast.unparse(with_sizes_known_at(text, line, ast.parse(expression, mode="eval").body))


def test_a_scripts_own_tensors_size_what_its_calls_launch() -> None:
    """A tutorial makes its tensors and calls its wrapper below the kernel: the launch reads those sizes."""
    assert _known_at(TUTORIAL_SCRIPT, "add_kernel[(", "n_elements") == "98432"
    assert _known_at(TUTORIAL_SCRIPT, "return max(m.shape[0], 1)", "m.shape[1]") == "781", "through .half() and the main block"
    kernelbench = TUTORIAL_SCRIPT + "\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return add(x, x)\n"
    assert _known_at(kernelbench, "add_kernel[(", "n_elements") == "n_elements", "a KernelBench model is given its tensors"

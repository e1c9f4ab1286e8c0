"""The lines the embedded forecaster reads KernelBench solutions through: which pairs each applies
to, that the shipped file moves their forecast and no other, and how they are fitted (sources
weigh alike; solution against solution through the origin)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kernelcast.kernels_runtime.hardware import SPECS
from kernelcast.models.embedded.backend import EmbeddedBackend
from kernelcast.models.embedded.boosted import BoostedTrees
from kernelcast.models.embedded.features import FEATURE_NAMES, api_tokens, pair_features, token_counts
from kernelcast.models.embedded.kernelbench_prior import (
    MEMBERS_FILE,
    ORDER_FREE_KINDS,
    PRIOR_PATH,
    SUPPORT_PAIRS,
    SUPPORTING_SOURCES,
    TREES_FILE,
    WEIGHTS_ONLY_KINDS,
    KernelBenchPrior,
    Line,
)
from kernelcast.models.embedded.pair_kinds import (
    AGAINST_PROBLEM,
    BETWEEN_SOLUTIONS,
    COMPILED_AGAINST_EAGER,
    LIBRARY_AGAINST_COMPILED,
    LIBRARY_CALL,
    SOLUTION_EDIT,
    kind_flags,
    pair_kind,
)
from kernelcast.models.service.calibrated import Forecaster
from kernelcast.models.service.calibration import TEMPERATURE_RANGE
from kernelcast.wire import ForecastRequest, KernelSide, normal_bin_probabilities, with_direction_temperature
from workshop.training import kernelbench_prior
from workshop.training.kernelbench_prior import (
    CAPPED_SHARES,
    MISS_QUANTILES,
    Measured,
    fit,
    fit_direction_temperatures,
    fit_prior,
    fitted_kinds,
    forest_pool,
    grow_trees,
    held_out_lines,
    out_of_source_centres,
    problem_folds,
    source_weights,
    support_of,
    unsupported_widening,
)

HARDWARE = {**SPECS["H100-SXM"].to_json(), "fingerprint": SPECS["H100-SXM"].fingerprint()}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PROBLEM = (
    "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
    "def get_inputs():\n    return [torch.randn(4096, 4096)]\n"
)
SOLUTION = (
    "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
    "source = '__global__ void relu_kernel(const float* x, float* y, int n) "
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = fmaxf(x[i], 0.f); }'\n"
    "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
)


# Another author's solution of the same problem.
TRITON_SOLUTION = (
    "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
    "def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)\n\n"
    "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n"
    "        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)\n        return y\n"
)


# A ModelNew(Model) that calls a library's kernel: the kernel that runs is out of sight.
LIBRARY_CALLER = PROBLEM + (
    "\nfrom some_library.ops import relu as library_op\n\nclass ModelNew(Model):\n    def forward(self, x):\n        return library_op(x)\n"
)


# The problem under torch.compile, as a user wraps it.
COMPILED = PROBLEM + (
    "\nclass ModelNew(Model):\n    def __init__(self):\n        super().__init__()\n"
    "        self.compiled = torch.compile(super().forward)\n\n    def forward(self, x):\n        return self.compiled(x)\n"
)


def kernelbench_pair(candidate_language: str = "cuda", candidate: str = SOLUTION) -> ForecastRequest:
    return ForecastRequest(KernelSide(PROBLEM, "pytorch", "Model"), KernelSide(candidate, candidate_language, "ModelNew"), HARDWARE, None)


def test_a_solution_is_read_against_its_problem_or_against_another_solution() -> None:
    assert pair_kind(kernelbench_pair("cuda")) == AGAINST_PROBLEM
    assert pair_kind(kernelbench_pair("triton")) == AGAINST_PROBLEM
    # A torch-only rewrite or torch.compile of the problem: no kernels of its own, no line was fitted on them.
    assert pair_kind(kernelbench_pair("pytorch")) is None
    # A library's kernel called from a ModelNew(Model) wrapper is not an LLM's rewrite: it has a line of its own.
    assert pair_kind(kernelbench_pair("triton", LIBRARY_CALLER)) == LIBRARY_CALL
    # Against the problem under torch.compile it is a kind of its own, which the trees read as a library call.
    compiled_problem = KernelSide(COMPILED, "pytorch", "ModelNew")
    against_compiled = ForecastRequest(compiled_problem, KernelSide(LIBRARY_CALLER, "triton", "ModelNew"), HARDWARE)
    assert pair_kind(against_compiled) == LIBRARY_AGAINST_COMPILED
    assert kind_flags([LIBRARY_AGAINST_COMPILED]).tolist() == kind_flags([LIBRARY_CALL]).tolist()
    assert kind_flags([COMPILED_AGAINST_EAGER, None]).sum() == 0
    # Two library calls of one problem against each other (a chunked and a recurrent form) are two solutions of it.
    other_form = LIBRARY_CALLER.replace("import relu as library_op", "import relu_recurrent as library_op")
    forms = ForecastRequest(KernelSide(LIBRARY_CALLER, "triton", "ModelNew"), KernelSide(other_form, "triton", "ModelNew"), HARDWARE)
    assert pair_kind(forms) == BETWEEN_SOLUTIONS
    solutions = ForecastRequest(KernelSide(SOLUTION, "cuda", "ModelNew"), KernelSide(TRITON_SOLUTION, "triton", "ModelNew"), HARDWARE, None)
    assert pair_kind(solutions) == BETWEEN_SOLUTIONS
    # One solution with a line edited (its block size) has a line of its own, which reads its launch.
    edited = SOLUTION.replace("return x\n", "return x  # launched with 512 threads\n")
    assert edited != SOLUTION
    edit = ForecastRequest(KernelSide(SOLUTION, "cuda", "ModelNew"), KernelSide(edited, "cuda", "ModelNew"), HARDWARE, None)
    assert pair_kind(edit) == SOLUTION_EDIT
    # Kernels in .cu files are read as the weights read them.
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    sgemm = ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(tiled, "cuda", "sgemm"), HARDWARE, None)
    assert pair_kind(sgemm) is None
    # The problem under torch.compile against itself eager has a line of its own, read with the compiled
    # side as the candidate (the other order is read swapped); compiled on both sides, or only in a
    # comment, it has none.
    compiled = kernelbench_pair("pytorch", COMPILED)
    assert pair_kind(compiled) == COMPILED_AGAINST_EAGER
    assert pair_kind(ForecastRequest(compiled.candidate, compiled.reference, HARDWARE)) is None
    assert pair_kind(ForecastRequest(compiled.candidate, compiled.candidate, HARDWARE)) is None
    commented = COMPILED.replace("self.compiled = torch.compile(super().forward)", "self.compiled = super().forward  # torch.compile(")
    assert pair_kind(kernelbench_pair("pytorch", commented)) is None
    # A prior with one line only reads that kind.
    only_problem = KernelBenchPrior({AGAINST_PROBLEM: Line(-1.0, 1.0, 1.0)})
    assert only_problem.applies(kernelbench_pair()) == AGAINST_PROBLEM and only_problem.applies(solutions) is None


def test_a_model_new_that_subclasses_the_problem_is_a_library_call_only_when_it_calls_imported_code() -> None:
    # Kernels of its own, reusing the problem's __init__: a solution (TritonBench's LLM candidates in this
    # form were read as library calls, by the weights alone, and called at 0.8 or more half wrong).
    own = TRITON_SOLUTION.replace("class ModelNew(torch.nn.Module):", PROBLEM + "\nclass ModelNew(Model):")
    assert "class ModelNew(Model):" in own
    assert pair_kind(kernelbench_pair("triton", own)) == AGAINST_PROBLEM
    # The frameworks' and the standard library's names do not make it a library call...
    with_frameworks = own.replace("import torch\n", "import torch\nimport math\nfrom torch.nn import functional as F\n", 1)
    with_frameworks = with_frameworks.replace("return y\n", "return F.relu(y) * math.sqrt(1.0)\n")
    assert pair_kind(kernelbench_pair("triton", with_frameworks)) == AGAINST_PROBLEM
    # ...a package's, or a module of the user's own, named in the class does.
    for imported in ("import some_library\n", "from some_library.ops import relu\n", "from .kernels import relu\n"):
        name = "some_library" if imported.startswith("import ") else "relu"
        caller = own.replace("import torch\n", "import torch\n" + imported, 1).replace("return y\n", f"return {name}\n")
        assert pair_kind(kernelbench_pair("triton", caller)) == LIBRARY_CALL, imported
    # Imported but not called from the class: still a solution.
    unused = own.replace("import torch\n", "import torch\nfrom some_library.ops import relu\n", 1)
    assert pair_kind(kernelbench_pair("triton", unused)) == AGAINST_PROBLEM
    # A wrapper whose text does not parse is read as before: a library call.
    assert pair_kind(kernelbench_pair("triton", LIBRARY_CALLER + "\ndef broken(:\n")) == LIBRARY_CALL
    # An own-kernel wrapper against a library call of the same problem: two solutions of it.
    mixed = ForecastRequest(KernelSide(own, "triton", "ModelNew"), KernelSide(LIBRARY_CALLER, "triton", "ModelNew"), HARDWARE)
    assert pair_kind(mixed) == BETWEEN_SOLUTIONS
    # A library call against a solution of a ModelNew of its own: no line was fitted on such pairs.
    apart = ForecastRequest(KernelSide(TRITON_SOLUTION, "triton", "ModelNew"), KernelSide(LIBRARY_CALLER, "triton", "ModelNew"), HARDWARE)
    assert pair_kind(apart) is None


def test_the_shipped_lines_move_kernelbench_forecasts_and_leave_others_alone(tmp_path: Path) -> None:
    shipped = EmbeddedBackend()
    without = EmbeddedBackend(prior_path=tmp_path / "none.json")
    assert shipped.prior is not None and without.prior is None and shipped.model_id != without.model_id
    solutions = ForecastRequest(KernelSide(SOLUTION, "cuda", "ModelNew"), KernelSide(TRITON_SOLUTION, "triton", "ModelNew"), HARDWARE, None)
    library = kernelbench_pair("triton", LIBRARY_CALLER)
    triton_solution = kernelbench_pair("triton", TRITON_SOLUTION)
    compiled = kernelbench_pair("pytorch", COMPILED)
    against_compiled = ForecastRequest(KernelSide(COMPILED, "pytorch", "ModelNew"), library.candidate, HARDWARE)
    kinds = (
        (triton_solution, AGAINST_PROBLEM),
        (solutions, BETWEEN_SOLUTIONS),
        (library, LIBRARY_CALL),
        (against_compiled, LIBRARY_AGAINST_COMPILED),
    )
    for request, kind in (*kinds, (compiled, COMPILED_AGAINST_EAGER)):
        line = shipped.prior.lines[kind]
        moved, plain = shipped.predict(request).details, without.predict(request).details
        assert moved["kernelbench_prior"] == kind and "kernelbench_prior" not in plain
        assert moved["trees_read"] == (kind not in WEIGHTS_ONLY_KINDS)
        # The line reads the trees' forecast, which reads the weights' (plain) forecast and the pair;
        # a library's kernel's line, and the compiled problem's, read the weights' forecast itself,
        # which no source's trees move.
        codes = [(request.reference.code, request.candidate.code)]
        tokens = shipped.prior.tokens_of(codes)
        read = shipped.prior.read(pair_features(request)[None], [plain["mean_log2"]], [plain["spread_log2"]], [kind], tokens)
        centre, across = float(read[0][0]), float(read[1][0])
        if kind in WEIGHTS_ONLY_KINDS:
            assert centre == pytest.approx(plain["mean_log2"], abs=1e-9) and across == 0
        else:
            assert centre != pytest.approx(plain["mean_log2"], abs=1e-3) and across > 0
        assert moved["mean_log2"] == pytest.approx(line.intercept + line.slope * centre, abs=1e-3)
        # The sources' disagreement about the pair widens the line's spread.
        assert moved["source_spread_log2"] == pytest.approx(across, abs=1e-3)
        assert moved["spread_log2"] == pytest.approx(max(math.hypot(line.sd, across), plain["spread_log2"]), abs=1e-3)
        widened = line.bin_probabilities(centre, max(math.hypot(line.sd, across), plain["spread_log2"]), both_ways=kind in ORDER_FREE_KINDS)
        # Then as sure of its direction as the kind's forecasts in the candidate's language were right;
        # two solutions, which could be given either way round, in either side's language (the geometric mean).
        by_language = shipped.prior.direction_temperatures[kind]
        sides = {request.candidate.language} | ({request.reference.language} if kind in ORDER_FREE_KINDS else set())
        temperature = math.prod(by_language[language] for language in sides) ** (1 / len(sides))
        assert temperature != pytest.approx(1.0, abs=0.02)
        sure_as_right = with_direction_temperature(np.array([widened]), temperature)[0]
        assert shipped.predict(request).probabilities == pytest.approx(sure_as_right.tolist(), abs=1e-4)
    # Two solutions swapped: the forecast flips exactly, trees, shape and all: the bins mirror.
    swapped = ForecastRequest(solutions.candidate, solutions.reference, HARDWARE, None)
    assert shipped.predict(swapped).details["mean_log2"] == pytest.approx(-shipped.predict(solutions).details["mean_log2"], abs=2e-4)
    assert shipped.predict(swapped).probabilities == pytest.approx(shipped.predict(solutions).probabilities[::-1], abs=1e-4)
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    sgemm = ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(tiled, "cuda", "sgemm"), HARDWARE, None)
    assert shipped.predict(sgemm).probabilities == without.predict(sgemm).probabilities


def test_a_problem_against_its_solution_is_the_solution_against_the_problem_mirrored() -> None:
    """A user may take the solution as the reference and the problem as the candidate: no line reads
    that order, and the weights alone called the problem slower at 0.99 where its line, read the
    usual way round, stays unsure."""
    shipped = EmbeddedBackend()
    built_on_cute = SOLUTION.replace("source = '", 'source = """\n#include <cute/tensor.hpp>\n').replace("0.f); }'", '0.f); }"""')
    pairs = (
        kernelbench_pair("cuda"),
        kernelbench_pair("triton"),
        kernelbench_pair("triton", LIBRARY_CALLER),
        kernelbench_pair("cuda", built_on_cute),
    )
    for forward in pairs:
        backward = ForecastRequest(forward.candidate, forward.reference, HARDWARE, None, assumed=("reference launch",))
        usual = shipped.predict(ForecastRequest(forward.reference, forward.candidate, HARDWARE, None, assumed=("candidate launch",)))
        mirrored = shipped.predict(backward)
        assert mirrored.probabilities == pytest.approx(usual.probabilities[::-1], abs=1e-9)
        assert mirrored.details["mean_log2"] == -usual.details["mean_log2"]
        assert mirrored.details["kernelbench_prior"] == usual.details["kernelbench_prior"]
        assert mirrored.details["read_the_other_way_round"] and "read_the_other_way_round" not in usual.details
        # What each side is stays with that side.
        assert mirrored.details["reference_log2_time"] == usual.details["candidate_log2_time"]
        assert ("out_of_sight" in usual.details) == (forward.candidate.code == built_on_cute)
        assert [role.split(":")[0] for role in mirrored.details.get("out_of_sight", [])] == [
            {"candidate": "reference", "reference": "candidate"}[role.split(":")[0]] for role in usual.details.get("out_of_sight", [])
        ]


@pytest.mark.parametrize("kind", ["plain CUDA", COMPILED_AGAINST_EAGER, AGAINST_PROBLEM, BETWEEN_SOLUTIONS, LIBRARY_CALL])
def test_a_pair_swapped_gets_the_mirror_image_of_its_calibrated_forecast(kind: str) -> None:
    """What the user is shown, calibration and all: which side is the reference changes only which way
    round the bins lie. (A launch edit is the one kind with a direction: the edited side lost more often
    than its line said.)"""
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    request = {
        "plain CUDA": ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(tiled, "cuda", "sgemm"), HARDWARE, None),
        COMPILED_AGAINST_EAGER: kernelbench_pair("pytorch", COMPILED),
        AGAINST_PROBLEM: kernelbench_pair("triton", TRITON_SOLUTION),
        BETWEEN_SOLUTIONS: ForecastRequest(
            KernelSide(SOLUTION, "cuda", "ModelNew"), KernelSide(TRITON_SOLUTION, "triton", "ModelNew"), HARDWARE
        ),
        LIBRARY_CALL: kernelbench_pair("triton", LIBRARY_CALLER),
    }[kind]
    forecaster = Forecaster(["embedded"])
    forward = forecaster.forecast(request).probabilities
    backward = forecaster.forecast(ForecastRequest(request.candidate, request.reference, HARDWARE, None)).probabilities
    assert backward == pytest.approx(forward[::-1], abs=1e-9)


def test_the_fit_weighs_every_source_alike() -> None:
    # Source a (two pairs) lies on y = 1 + m, source b (eight pairs) on y = -1 + m, both at m = 0 and 1.
    # Weighted alike the intercept sits halfway, at 0; pooled, b's eight pairs would pull it to -0.6.
    means = [0.0, 1.0] + [0.0, 1.0] * 4
    speedups = [1.0, 2.0] + [-1.0, 0.0] * 4
    line = fit(means, speedups, ["a"] * 2 + ["b"] * 8)
    assert line.intercept == pytest.approx(0.0, abs=1e-3) and line.slope == pytest.approx(1.0, abs=1e-3)
    assert line.sd == pytest.approx(1.0, abs=1e-3)
    assert line.adjust(2.0, 0.3) == (pytest.approx(line.intercept + 2.0 * line.slope), line.sd)
    assert line.adjust(2.0, 5.0)[1] == 5.0  # never narrower than the weights' own spread (novelty widens it)


def test_a_line_is_as_wide_as_it_missed_on_a_source_left_out() -> None:
    # Sources a and b as above, SUPPORT_PAIRS pairs each: fitted together the line is y = m with
    # residuals of 1; fitted on either alone it misses the other by 2, so the shipped spread is 2, not 1.
    lying = {"a": ((0.0, 1.0), (1.0, 2.0)), "b": ((0.0, -1.0), (1.0, 0.0))}
    rows = [(source, m, y) for source, points in lying.items() for m, y in points * (SUPPORT_PAIRS // 2)]
    pairs = [SimpleNamespace(source=source, log2_speedup=y) for source, _, y in rows]
    means = {i: m for i, (_, m, _) in enumerate(rows)}
    fitted = {AGAINST_PROBLEM: list(range(len(rows)))}
    line = held_out_lines(fitted, means, pairs, {"a", "b"})[AGAINST_PROBLEM]
    assert (line.intercept, line.slope) == (pytest.approx(0.0, abs=1e-3), pytest.approx(1.0, abs=1e-3))
    assert line.sd == pytest.approx(2.0, abs=1e-3)
    # Its shape is those misses: a's pairs land 2 above the line fitted on b, b's 2 below a's.
    assert (line.misses[0], line.misses[-1]) == (pytest.approx(-2.0), pytest.approx(2.0)) and len(line.misses) == MISS_QUANTILES
    # One source alone has no source to leave out: its own residual spread stands.
    alone = held_out_lines(fitted, means, pairs, {"a"})[AGAINST_PROBLEM]
    assert alone.sd == pytest.approx(0.0, abs=1e-3)
    # A source of two pairs far off is not left out: it would weigh as much as a or b in saying how
    # far a new source lands (a third of the shape three octaves up). Its pairs still count in the fit.
    few = [*pairs, SimpleNamespace(source="c", log2_speedup=3.5), SimpleNamespace(source="c", log2_speedup=3.5)]
    fitted_few = {AGAINST_PROBLEM: list(range(len(few)))}
    with_few = held_out_lines(fitted_few, {**means, len(rows): 0.0, len(rows) + 1: 0.0}, few, {"a", "b", "c"})[AGAINST_PROBLEM]
    assert with_few.intercept > 0.5 and max(with_few.misses) < 2.5 and with_few.sd < 2.5


def test_a_capped_source_weighs_its_share_in_how_far_a_line_missed() -> None:
    # Sources a and b as above, and a third, SUPPORT_PAIRS pairs three octaves above the line. Named
    # like any source it would weigh as much as a or b in the spread and the shape; CUDA-L2, whose
    # pairs weigh a tenth in the fit (CAPPED_SHARES), weighs a tenth here too.
    lying = {"a": ((0.0, 1.0), (1.0, 2.0)), "b": ((0.0, -1.0), (1.0, 0.0))}
    rows = [(source, m, y) for source, points in lying.items() for m, y in points * (SUPPORT_PAIRS // 2)]

    def line_with(third: str) -> Line:
        placed = rows + [(third, m, m + 3.0) for m in (0.0, 1.0) * (SUPPORT_PAIRS // 2)]
        pairs = [SimpleNamespace(source=source, log2_speedup=y) for source, _, y in placed]
        means = {i: m for i, (_, m, _) in enumerate(placed)}
        return held_out_lines({AGAINST_PROBLEM: list(range(len(placed)))}, means, pairs, {"a", "b", third})[AGAINST_PROBLEM]

    capped, whole = line_with("cuda-l2"), line_with("c")
    assert capped.sd < whole.sd
    far = [sum(miss > 2.25 for miss in line.misses) / len(line.misses) for line in (capped, whole)]
    assert far[0] < 0.1 < 0.25 < far[1]  # about a twentieth of the shape against a third


def test_a_line_forecasts_in_the_shape_of_its_misses() -> None:
    # Most pairs on the line, one in five three octaves off either side: the RMS miss is 1.34, but
    # a forecast on the line keeps far more mass in the two bins around it than a normal that wide.
    misses = (-3.0,) * 4 + (0.0,) * 32 + (3.0,) * 4
    line = Line(0.0, 1.0, 1.34, misses, 0.1)
    shaped, normal = line.bin_probabilities(0.0, 0.5), normal_bin_probabilities(0.0, 1.34)
    assert sum(shaped) == pytest.approx(1.0)
    assert shaped[3] + shaped[4] > 0.75 > normal[3] + normal[4]
    # The tails are still there: a tenth of the mass in each end bin.
    assert shaped[0] == pytest.approx(0.1, abs=0.01) and shaped[-1] == pytest.approx(0.1, abs=0.01)
    # A model twice as unsure as the line (an unfamiliar pair) stretches the shape: wider, same centre.
    stretched = line.bin_probabilities(0.0, 2.68)
    assert stretched[3] + stretched[4] < shaped[3] + shaped[4] and stretched == pytest.approx(stretched[::-1])
    # A line without misses (a file written before they were kept) is the normal of its spread.
    assert Line(0.0, 1.0, 1.34).bin_probabilities(0.0, 0.5) == pytest.approx(normal)


def test_solution_against_solution_runs_through_the_origin() -> None:
    # Every pair both ways round: (m, y) and (-m, -y). The slope is sum(m·y) / sum(m²) = 4.4 / 10.
    means = [1.0, -1.0, 2.0, -2.0]
    speedups = [0.8, -0.8, 0.7, -0.7]
    line = fit(means, speedups, ["a"] * 4, "origin")
    assert line.intercept == 0.0 and line.slope == pytest.approx(0.44, abs=1e-3)


def test_the_hover_says_a_kernelbench_pair_was_read_through_its_line_and_how_far_the_sources_disagree() -> None:
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.server.hover import _forecast_lines

    forecast = Forecaster(["embedded"]).forecast(kernelbench_pair())
    spread = forecast.provenance["details"]["source_spread_log2"]
    text = "\n".join(_forecast_lines(forecast))
    assert f"Read as a KernelBench {AGAINST_PROBLEM} pair" in text and f"disagree here by ±{spread:.2f} octaves" in text
    assert "launches ModelNew makes of its own kernels are not read" in text
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    sgemm = Forecaster(["embedded"]).forecast(
        ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(tiled, "cuda", "sgemm"), HARDWARE)
    )
    assert "KernelBench" not in "\n".join(_forecast_lines(sgemm))


def test_the_shipped_file_says_what_it_was_fitted_on() -> None:
    data = json.loads(PRIOR_PATH.read_text())
    assert set(data) == {"lines", "support", "unsupported_widening", "direction_temperatures", "meta", "token_vocabulary"}
    # The trees read the API tokens written on the most sides, each once, a language's own among them.
    vocabulary = data["token_vocabulary"]
    assert len(vocabulary) == len(set(vocabulary)) == 60 and {"tl.dot", "__global__", "torch.compile"} <= set(vocabulary)
    assert set(data["lines"]) == {AGAINST_PROBLEM, BETWEEN_SOLUTIONS, SOLUTION_EDIT, *WEIGHTS_ONLY_KINDS}
    # Solutions in CUDA came from several sources; a kind too few measured is forecast wider, never narrower.
    assert data["support"][AGAINST_PROBLEM]["cuda"] >= 3 and data["unsupported_widening"] >= 1.0
    # Two solutions, or a solution and its edit, come in either order: those lines run through the origin.
    assert data["lines"][BETWEEN_SOLUTIONS]["intercept"] == 0.0 and data["lines"][SOLUTION_EDIT]["intercept"] == 0.0
    # A library call keeps the weights' mean; its misses are as wide on either side.
    for kind in (LIBRARY_CALL, LIBRARY_AGAINST_COMPILED):
        line = data["lines"][kind]
        assert (line["intercept"], line["slope"]) == (0.0, 1.0) and line["misses"] == pytest.approx([-m for m in line["misses"][::-1]])
    # A compiled problem's line moves the weights' forecast: inductor beat eager by more than they said.
    assert data["lines"][COMPILED_AGAINST_EAGER]["intercept"] > 0.0
    assert all(len(line["misses"]) == MISS_QUANTILES and line["bandwidth"] > 0 for line in data["lines"].values())
    assert all(count > 100 for count in data["meta"]["pairs"].values()) and len(data["meta"]["sources"]) >= 5
    # A direction temperature only where two sources measured that kind in that language, for both languages of
    # a solution against its problem.
    temperatures = data["direction_temperatures"]
    assert set(temperatures[AGAINST_PROBLEM]) == {"cuda", "triton"}
    assert all(
        data["support"][kind][language] >= SUPPORTING_SOURCES and TEMPERATURE_RANGE[0] < value < TEMPERATURE_RANGE[1]
        for kind, by_language in temperatures.items()
        for language, value in by_language.items()
    )
    prior = KernelBenchPrior.load(PRIOR_PATH)
    assert prior is not None and prior.to_json() == data
    # The trees beside them learnt from every measured pair, of more sources than the lines read.
    assert prior.trees is not None and (PRIOR_PATH.parent / TREES_FILE).exists()
    grown = data["meta"]["trees"]
    assert len(prior.trees.roots) == grown["settings"]["rounds"] * grown["seeds"]  # one forest per seed, averaged
    assert data["meta"]["trees"]["pairs"] > sum(data["meta"]["pairs"].values())
    # And one member for each source the lines read, grown without it.
    assert (PRIOR_PATH.parent / MEMBERS_FILE).exists() and len(prior.members) >= 5
    assert data["meta"]["members"].endswith(", ".join(data["meta"]["held_out_direction_accuracy"]))


# A KernelBench solution whose load_inline CUDA launches with one block-size constant.
LAUNCHING_SOLUTION = (Path(__file__).parent / "data" / "kernelbench_launching_solution.py").read_text()


def test_a_block_size_edit_of_a_solution_is_read_from_its_host_launch(tmp_path: Path) -> None:
    from kernelcast.analysis import read_as_the_editor
    from kernelcast.batch import editor_request
    from kernelcast.cache import ResultCache
    from kernelcast.models.embedded.features import pair_features, without_launches
    from kernelcast.models.service.calibrated import Forecaster

    wide = LAUNCHING_SOLUTION.replace("const int threads = 256;", "const int threads = 1024;")
    line = {"reference": {"code": LAUNCHING_SOLUTION, "language": "cuda", "name": "ModelNew"}, "gpu": "H100-SXM"}
    edit, _ = editor_request({**line, "candidate": {"code": wide, "language": "cuda", "name": "ModelNew"}}, 0.8, False)
    blocks = [side.facts["launches"][0]["block"] for side in (edit.reference, edit.candidate)]
    assert blocks == [[256], [1024]] and pair_kind(edit) == SOLUTION_EDIT
    # kernelcast eval's path reads the same launches.
    cache = ResultCache(tmp_path / "cache")
    bare = ForecastRequest(KernelSide(LAUNCHING_SOLUTION, "cuda", "ModelNew"), KernelSide(wide, "cuda", "ModelNew"), HARDWARE)
    read, _ = read_as_the_editor(bare, SPECS["H100-SXM"], cache)
    launches = [side.facts["launches"] for side in (edit.reference, edit.candidate)]
    assert [side.facts["launches"] for side in (read.reference, read.candidate)] == launches
    forecaster = Forecaster(["embedded"])
    details = forecaster.forecast(edit).provenance["details"]
    assert details["mean_log2"] != 0.0 and details["kernelbench_prior"] == SOLUTION_EDIT  # through the edits' line
    same, _ = editor_request({**line, "candidate": {"code": LAUNCHING_SOLUTION + "\n", "language": "cuda", "name": "ModelNew"}}, 0.8, False)
    assert forecaster.forecast(same).provenance["details"]["mean_log2"] == 0.0
    # Against its problem the pair is read through the line, as it was fitted: without those launches.
    against = ForecastRequest(KernelSide(PROBLEM, "pytorch", "Model"), edit.candidate, HARDWARE, None)
    assert (pair_features(against) == pair_features(without_launches(against))).all()
    assert not (pair_features(edit) == pair_features(without_launches(edit))).all()


def test_an_edit_pair_without_get_inputs_launches_on_the_sizes_it_states(tmp_path: Path) -> None:
    """Neither side of a solution against its launch edit has `get_inputs()`: a pair that states its
    problem's size (2^30 elements) launches on it, not on the 2^20 a file alone is guessed to run on."""
    from kernelcast.analysis import read_as_the_editor
    from kernelcast.cache import ResultCache

    wide = LAUNCHING_SOLUTION.replace("const int threads = 256;", "const int threads = 1024;")
    cache = ResultCache(tmp_path / "cache")
    sides = (KernelSide(LAUNCHING_SOLUTION, "cuda", "ModelNew"), KernelSide(wide, "cuda", "ModelNew"))
    stated, _ = read_as_the_editor(ForecastRequest(*sides, HARDWARE, {"n": 1 << 30}), SPECS["H100-SXM"], cache)
    guessed, _ = read_as_the_editor(ForecastRequest(*sides, HARDWARE), SPECS["H100-SXM"], cache)
    grids = [[side.facts["launches"][0]["grid"] for side in (read.reference, read.candidate)] for read in (stated, guessed)]
    assert grids == [[[1 << 22], [1 << 20]], [[1 << 12], [1 << 10]]]
    # Against a problem whose get_inputs() states its inputs, sizes the solution cannot read from them
    # stay guessed, stated size or not: the fit learnt a library's derived sizes so.
    unsized = PROBLEM.replace("torch.randn(4096, 4096)", "torch.randn(batch_size(), dim())")
    against = [ForecastRequest(KernelSide(unsized, "pytorch", "Model"), sides[1], HARDWARE, problem) for problem in ({"n": 1 << 30}, None)]
    grids = [read_as_the_editor(request, SPECS["H100-SXM"], cache)[0].candidate.facts["launches"][0]["grid"] for request in against]
    assert grids == [[1 << 10], [1 << 10]]


# The languages of a Triton solution against its PyTorch problem, which is all a fitted pair's request is read for.
TRITON_AGAINST_PYTORCH = SimpleNamespace(reference=SimpleNamespace(language="pytorch"), candidate=SimpleNamespace(language="triton"))


def _three_sources(seed: int) -> tuple[list[SimpleNamespace], np.ndarray]:
    """40 pairs each of sources a (measured 2 octaves faster), b and c (2 slower), on noise features
    whose sides differ as a problem and its solution do (the first column: "pytorch")."""
    rng = np.random.default_rng(seed)
    pairs = [
        SimpleNamespace(source=source, language="triton", request=TRITON_AGAINST_PYTORCH, log2_speedup=2.0 if source == "a" else -2.0)
        for source in ["a"] * 40 + ["b"] * 40 + ["c"] * 40
    ]
    features = rng.normal(size=(len(pairs), 2, len(FEATURE_NAMES)))
    features[:, :, 0] = [1.0, 0.0]
    return pairs, features


def test_a_line_is_fitted_on_forecasts_of_trees_that_never_saw_the_source() -> None:
    # Three sources with the same features and the same weights' forecast: a's pairs measured 2
    # octaves faster, b's and c's 2 slower. Trees grown on b and c forecast a's pairs slower: that
    # miss is what a line must learn from, not the trees' fit of a itself.
    pairs, features = _three_sources(0)
    data = Measured(pairs, features, np.zeros(len(pairs)), np.ones(len(pairs)), [AGAINST_PROBLEM] * len(pairs))
    centres, members = out_of_source_centres(data, range(len(pairs)), {"a", "b", "c"})
    assert len(members) == 3, "one member a source left out"
    assert all(centres[i] < -1.0 for i in range(40))
    # b's forecast comes from a and c, which weigh the same: halfway.
    assert abs(np.mean([centres[i] for i in range(40, 80)])) < 0.5
    # Grown on all three, every source weighing the same, the trees meet the three where they lie.
    everything = data.corrected(grow_trees(data, range(len(pairs))), range(len(pairs)))
    assert np.mean(everything[:40]) > 1.0 and np.mean(everything[40:]) < -1.0


def test_trees_are_the_same_whatever_the_number_of_processes_growing_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each seed's forest grows on one thread in a pool of one process a CPU: a refit on another
    # machine must ship the same trees.
    pairs, features = _three_sources(3)
    data = Measured(pairs, features, np.zeros(len(pairs)), np.ones(len(pairs)), [AGAINST_PROBLEM] * len(pairs))
    grown = {}
    for workers in (1, 3):
        monkeypatch.setattr(kernelbench_prior, "default_jobs", lambda: workers)
        forest_pool.cache_clear()
        grown[workers] = grow_trees(data, range(len(pairs)))
        forest_pool().shutdown()
    forest_pool.cache_clear()
    for name in BoostedTrees.ARRAYS:
        assert np.array_equal(getattr(grown[1], name), getattr(grown[3], name)), name


def test_a_library_kernels_line_is_fitted_on_and_reads_the_weights_forecast() -> None:
    # Library a measured 2 octaves faster than the weights forecast, b and c 2 slower: trees grown
    # on b and c would forecast a's pairs slower; the library line keeps the weights' forecast and
    # learns how far it missed, as wide on either side.
    pairs, features = _three_sources(2)
    mean = np.full(len(pairs), 0.3)
    data = Measured(pairs, features, mean, np.ones(len(pairs)), [LIBRARY_CALL] * len(pairs))
    prior = fit_prior(data, fitted_kinds(data), {"a", "b", "c"})
    assert prior.trees is None and prior.members == (), "no line reads trees: none grow"
    line = prior.lines[LIBRARY_CALL]
    assert (line.intercept, line.slope) == (0.0, 1.0)
    assert min(line.misses) < -2.0 and max(line.misses) > 1.5, "the misses of the weights' 0.3, both ways"
    centre, across = prior.read(features[:5], mean[:5], np.ones(5), [LIBRARY_CALL] * 5)
    assert centre == pytest.approx(mean[:5]) and (across == 0).all()


def test_a_forecast_the_sources_disagree_on_is_wider_and_one_they_agree_on_is_not() -> None:
    # Source a measured 2 octaves faster, b and c 2 slower, on the same features: the member grown
    # without a forecasts a's pairs slower, those grown with it halfway or faster.
    pairs, features = _three_sources(1)
    data = Measured(pairs, features, np.zeros(len(pairs)), np.ones(len(pairs)), [AGAINST_PROBLEM] * len(pairs))
    _, members = out_of_source_centres(data, range(len(pairs)), {"a", "b", "c"})
    line = Line(0.0, 1.0, 0.5)
    disagreeing = KernelBenchPrior({AGAINST_PROBLEM: line}, {}, members[0], members)
    agreeing = KernelBenchPrior({AGAINST_PROBLEM: line}, {}, members[0], (members[0],) * 3)
    ones = np.ones(40)
    spread = disagreeing.read(features[:40], 0 * ones, ones, [AGAINST_PROBLEM] * 40)[1]
    assert (spread > 1.0).all() and agreeing.read(features[:40], 0 * ones, ones, [AGAINST_PROBLEM] * 40)[1] == pytest.approx(0 * ones)
    centre = float(disagreeing.read(features[:1], [0.0], [0.1], [AGAINST_PROBLEM])[0][0])
    wide = disagreeing.bin_probabilities(AGAINST_PROBLEM, centre, 0.1, float(spread[0]), ("cuda",))
    narrow = agreeing.bin_probabilities(AGAINST_PROBLEM, centre, 0.1, 0.0, ("cuda",))
    assert narrow == line.bin_probabilities(centre, 0.1)
    assert sum(wide[4:]) > sum(narrow[4:]) + 0.2, "less sure it is slower"
    assert disagreeing.adjust(AGAINST_PROBLEM, centre, 0.1, float(spread[0]), "cuda")[1] == pytest.approx(math.hypot(0.5, spread[0]))


def test_cuda_l2_weighs_a_tenth_of_a_source_and_every_other_source_the_same() -> None:
    """Weighing as much as a whole source in the trees, CUDA-L2's GEMM pairs moved the KernelBench
    sources' forecasts the wrong way; shared/data/wild asks its share capped."""
    sources = ["eh-kernelbench"] * 3 + ["cuda-l2"] * 4 + ["llmkernel"]
    weights = source_weights(sources)
    totals = {source: sum(w for s, w in zip(sources, weights) if s == source) for source in set(sources)}
    assert totals == pytest.approx({"eh-kernelbench": 1.0, "llmkernel": 1.0, "cuda-l2": 0.1}) and CAPPED_SHARES == {"cuda-l2": 0.1}
    assert len(set(weights[3:7])) == 1, "a source's pairs weigh alike"


def test_the_sources_problems_are_dealt_into_disjoint_folds_the_same_way_each_run() -> None:
    pairs = [SimpleNamespace(source="a", op=f"L1/{n}") for n in range(12)] + [SimpleNamespace(source="b", op="L1/99")]
    pairs += [SimpleNamespace(source="b", op="L1/3"), SimpleNamespace(source="c", op="L2/1")]
    folds = problem_folds(pairs, {"a", "b"}, 5)
    assert sorted(len(fold) for fold in folds) == [2, 2, 3, 3, 3]
    # A problem two sources measured is held out of both at once; a source not judged deals none.
    assert set().union(*folds) == {f"L1/{n}" for n in range(12)} | {"L1/99"} and sum(len(fold) for fold in folds) == 13
    assert problem_folds(pairs, {"b", "a"}, 5) == folds
    # Fewer problems than folds: one fold a problem.
    assert sorted(map(sorted, problem_folds(pairs, {"b"}, 5))) == [["L1/3"], ["L1/99"]]


def test_a_kind_of_pair_too_few_sources_measured_in_its_language_is_forecast_wider(tmp_path: Path) -> None:
    """One source wrote nearly all the Triton solutions: with it left out, the lines had seen Triton
    pairs of one other author only, and forecast them as sure as CUDA pairs of four."""
    line = Line(0.0, 1.0, 0.8)
    prior = KernelBenchPrior({AGAINST_PROBLEM: line}, {}, support={AGAINST_PROBLEM: {"cuda": 4, "triton": 1}}, unsupported_widening=1.5)
    cuda, triton = (prior.bin_probabilities(AGAINST_PROBLEM, 1.0, 0.1, 0.0, (language,)) for language in ("cuda", "triton"))
    assert cuda == line.bin_probabilities(1.0, 0.1)
    assert sum(triton[4:]) < sum(cuda[4:]) - 0.05, "less sure it is faster"
    assert prior.adjust(AGAINST_PROBLEM, 1.0, 0.1, 0.0, ("triton",))[1] == pytest.approx(1.5 * 0.8)
    assert not prior.supported(AGAINST_PROBLEM, ("triton",)) and not prior.supported(AGAINST_PROBLEM, ("pytorch",))
    # A prior written before support was kept reads every pair as supported.
    assert KernelBenchPrior({AGAINST_PROBLEM: line}, {}).bin_probabilities(AGAINST_PROBLEM, 1.0, 0.1, 0.0, ("triton",)) == cuda
    # The file keeps both.
    path = tmp_path / "prior.json"
    path.write_text(json.dumps(prior.to_json()))
    loaded = KernelBenchPrior.load(path)
    assert loaded is not None and (loaded.support, loaded.unsupported_widening) == (prior.support, 1.5)
    # The hover says why such a forecast is wider.
    from kernelcast.server.hover import _prior_words

    details = {"kernelbench_prior": AGAINST_PROBLEM, "source_spread_log2": 0.3}
    assert "Fewer than two sources" in str(_prior_words({**details, "few_sources_of_kind": True}))
    assert "Fewer than two sources" not in str(_prior_words(details))
    # An edit of one solution is read with its launches, and says nothing of them.
    assert "not read" not in str(_prior_words({**details, "kernelbench_prior": SOLUTION_EDIT, "launches_read": True}))
    # A line on the weights' own forecast says so, and nothing of trees.
    compiled = str(_prior_words({"kernelbench_prior": COMPILED_AGAINST_EAGER, "source_spread_log2": 0.0, "trees_read": False}))
    assert "on the weights' own forecast" in compiled and "Trees" not in compiled
    assert "Trees fitted each without" in str(_prior_words({**details, "trees_read": True}))
    # A problem given as the candidate against its solution says it was read the other way round.
    assert "turned back" in str(_prior_words({**details, "read_the_other_way_round": True}))
    assert "turned back" not in str(_prior_words(details))


def test_the_widening_is_how_much_more_pairs_no_second_source_supported_missed() -> None:
    # Three CUDA sources land one octave either side of the line, one Triton source three: left out,
    # each CUDA source is still supported by two others, the Triton one by none; its misses are 3x.
    pairs = [
        SimpleNamespace(source=source, language=language, log2_speedup=size * (1 if i % 2 else -1))
        for source, language, size in (("a", "cuda", 1.0), ("b", "cuda", 1.0), ("d", "cuda", 1.0), ("c", "triton", 3.0))
        for i in range(SUPPORT_PAIRS)
    ]
    fitted = {AGAINST_PROBLEM: list(range(len(pairs)))}
    means = dict.fromkeys(range(len(pairs)), 0.0)
    assert support_of(fitted, pairs, {"a", "b", "c", "d"}) == {AGAINST_PROBLEM: {"cuda": 3, "triton": 1}}
    assert unsupported_widening(fitted, means, pairs, {"a", "b", "c", "d"}) == pytest.approx(3.0)
    # With every kind and language supported there is nothing to widen.
    assert unsupported_widening(fitted, means, pairs, {"a", "b", "d"}) == 1.0
    # A source with fewer than SUPPORT_PAIRS pairs of a kind does not count as measuring it.
    few = [pair for pair in pairs if pair.source != "d" or pair.log2_speedup > 0]
    assert support_of({AGAINST_PROBLEM: list(range(len(few)))}, few, {"a", "b", "d"}) == {AGAINST_PROBLEM: {"cuda": 2}}


def test_a_direction_temperature_makes_forecasts_of_unseen_sources_as_sure_as_they_were_right(tmp_path: Path) -> None:
    """LLM-written CUDA solutions were right more often than the lines said, Triton ones less:
    each kind and language two sources measured learns how much surer or less sure to be."""
    leaning_faster = [0.05, 0.05, 0.05, 0.15, 0.3, 0.2, 0.1, 0.1]  # P(faster) 0.7
    sure_faster = [0.0, 0.0, 0.05, 0.05, 0.3, 0.3, 0.2, 0.1]  # P(faster) 0.9
    # CUDA sources a and b: forecast 0.7 faster, nine in ten are. Triton c and d: forecast 0.9, seven in ten are.
    # e alone wrote its pytorch pairs: nothing to learn from one source.
    rows = [("a", "cuda", leaning_faster, i % 10 != 0) for i in range(SUPPORT_PAIRS)]
    rows += [("b", "cuda", leaning_faster, i % 10 != 0) for i in range(SUPPORT_PAIRS)]
    rows += [(source, "triton", sure_faster, i % 10 < 7) for source in "cd" for i in range(SUPPORT_PAIRS)]
    rows += [("e", "pytorch", sure_faster, True) for _ in range(SUPPORT_PAIRS)]
    pairs = [
        SimpleNamespace(source=source, language=language, log2_speedup=1.0 if faster else -1.0) for source, language, _, faster in rows
    ]
    data = SimpleNamespace(pairs=pairs, kinds=[AGAINST_PROBLEM] * len(rows))
    forecasts = {i: row[2] for i, row in enumerate(rows)}
    temperatures = fit_direction_temperatures(forecasts, data, lambda probabilities, _: probabilities, shrink=0.0)
    assert set(temperatures[AGAINST_PROBLEM]) == {"cuda", "triton"}
    cuda, triton = temperatures[AGAINST_PROBLEM]["cuda"], temperatures[AGAINST_PROBLEM]["triton"]
    assert cuda < 1.0 < triton
    # Tempered so, the forecasts say what the measurements did: 0.9 faster and 0.7.
    prior = KernelBenchPrior({AGAINST_PROBLEM: Line(0.0, 1.0, 0.5)}, {}, direction_temperatures=temperatures)
    tempered = with_direction_temperature(np.array([leaning_faster, sure_faster]), 1.0)
    assert tempered[:, 4:].sum(axis=1) == pytest.approx([0.7, 0.9])
    assert with_direction_temperature(np.array([leaning_faster]), cuda)[0, 4:].sum() == pytest.approx(0.9, abs=0.01)
    assert with_direction_temperature(np.array([sure_faster]), triton)[0, 4:].sum() == pytest.approx(0.7, abs=0.01)
    # The prior reads each pair through its kind and language's temperature; any other as the line says.
    line = prior.lines[AGAINST_PROBLEM]
    assert sum(prior.bin_probabilities(AGAINST_PROBLEM, 0.3, 0.1, 0.0, ("cuda",))[4:]) > sum(line.bin_probabilities(0.3, 0.1)[4:])
    assert prior.bin_probabilities(AGAINST_PROBLEM, 0.3, 0.1, 0.0, ("pytorch",)) == line.bin_probabilities(0.3, 0.1)

    # The service calibrates after the backend, so the temperature is learnt through its map: a map
    # that halves the direction's temperature itself leaves twice as much for the lines.
    def halving(probabilities: np.ndarray, _: object) -> np.ndarray:
        return with_direction_temperature(probabilities, 0.5)

    sharpened = fit_direction_temperatures(forecasts, data, halving, shrink=0.0)
    assert sharpened[AGAINST_PROBLEM]["cuda"] == pytest.approx(2 * cuda, rel=0.01)
    # Drawn toward 1, each temperature keeps its side of 1 but moves closer to it, the more so the stronger the pull.
    shrunk = fit_direction_temperatures(forecasts, data, lambda probabilities, _: probabilities)[AGAINST_PROBLEM]
    stronger = fit_direction_temperatures(forecasts, data, lambda probabilities, _: probabilities, shrink=0.5)[AGAINST_PROBLEM]
    assert cuda < shrunk["cuda"] < stronger["cuda"] < 1.0 < stronger["triton"] < shrunk["triton"] < triton
    path = tmp_path / "prior.json"
    path.write_text(json.dumps(prior.to_json()))
    loaded = KernelBenchPrior.load(path)
    assert loaded is not None and loaded.direction_temperatures == temperatures


def test_the_trees_learn_from_the_forecast_they_read_not_from_its_mixture_with_knowing_nothing() -> None:
    from kernelcast.models.embedded.backend import weights_forecast
    from kernelcast.models.service.calibrated import Forecaster
    from kernelcast.wire import LabelledPair

    # The shipped tiled SGEMM built on CuTe's headers: its kernel's cost is out of sight.
    naive, tiled = (EXAMPLES / "matmul_naive.cu").read_text(), (EXAMPLES / "matmul_tiled.cu").read_text()
    cute = "#include <cute/tensor.hpp>\n" + tiled
    request = ForecastRequest(KernelSide(naive, "cuda", "sgemm"), KernelSide(cute, "cuda", "sgemm"), HARDWARE)
    weights = weights_forecast(EmbeddedBackend().model, [request], pair_features(request)[None]).mean[0]
    data = kernelbench_prior.measured([LabelledPair("a", "variant", request, 1.0)], Forecaster(["embedded"]))
    forecast = Forecaster(["embedded"]).forecast(request).provenance["details"]
    assert forecast["out_of_sight"] and abs(weights) > 0.1
    # The forecast the editor shows is halfway to knowing nothing; the trees, which at inference read the
    # weights' forecast before that mixing, are grown on it too.
    assert forecast["mean_log2"] == pytest.approx(weights / 2, abs=1e-3)
    assert data.mean[0] == pytest.approx(weights, abs=1e-3)


def _sides(reference: str, candidate: str) -> SimpleNamespace:
    return SimpleNamespace(
        reference=SimpleNamespace(language="pytorch", code=reference), candidate=SimpleNamespace(language="triton", code=candidate)
    )


PROBLEM_TEXT = "class Model(nn.Module):\n    def forward(self, a, b):\n        return torch.matmul(a, b)\n"
WITH_DOT = "@triton.jit\ndef k(a, b, c):\n    acc = tl.dot(tl.load(a), tl.load(b))  # not tl.sum\n    tl.store(c, acc)\n"
WITHOUT_DOT = "@triton.jit\ndef k(a, b, c):\n    acc = tl.sum(tl.load(a) * tl.load(b))\n    tl.store(c, acc)\n"


def test_trees_read_which_api_tokens_each_side_writes_and_keep_them_in_the_file(tmp_path: Path) -> None:
    # Noise features; in every source the solutions calling `tl.dot` measured 2 octaves faster and the
    # others 2 slower. Only the tokens tell them apart, so trees that read them forecast each way.
    rng = np.random.default_rng(5)
    sources = [source for source in "abc" for _ in range(60)]
    dots = [i % 2 == 0 for i in range(len(sources))]
    requests = [_sides(PROBLEM_TEXT, WITH_DOT if dot else WITHOUT_DOT) for dot in dots]
    pairs = [
        SimpleNamespace(source=source, language="triton", request=request, log2_speedup=2.0 if dot else -2.0)
        for source, request, dot in zip(sources, requests, dots)
    ]
    features = rng.normal(size=(len(pairs), 2, len(FEATURE_NAMES)))
    codes = [(pair.request.reference.code, pair.request.candidate.code) for pair in pairs]
    vocabulary = kernelbench_prior.commonest_tokens(codes, 8)
    assert "tl.dot" in vocabulary and "tl.sum" in vocabulary, vocabulary
    assert "torch.matmul" in vocabulary and "tl.load" in vocabulary
    kinds = [AGAINST_PROBLEM] * len(pairs)
    data = Measured(pairs, features, np.zeros(len(pairs)), np.ones(len(pairs)), kinds, vocabulary, token_counts(codes, vocabulary))
    prior = fit_prior(data, fitted_kinds(data), {"a", "b", "c"})
    assert prior.vocabulary == vocabulary
    fresh = rng.normal(size=(2, 2, len(FEATURE_NAMES)))
    new_codes = [(PROBLEM_TEXT, WITH_DOT), (PROBLEM_TEXT, WITHOUT_DOT)]
    centre, _ = prior.read(fresh, np.zeros(2), np.ones(2), [AGAINST_PROBLEM] * 2, prior.tokens_of(new_codes))
    assert centre[0] > 1.0 and centre[1] < -1.0, centre
    # Read the other way round (the solution as the reference), the forecast is negated exactly.
    swapped_tokens = prior.tokens_of([pair[::-1] for pair in new_codes])
    swapped, _ = prior.read(fresh[:, ::-1], np.zeros(2), np.ones(2), [AGAINST_PROBLEM] * 2, swapped_tokens)
    assert swapped == pytest.approx(-centre)
    with pytest.raises(ValueError, match="texts"):
        prior.read(fresh, np.zeros(2), np.ones(2), [AGAINST_PROBLEM] * 2)
    with pytest.raises(ValueError, match="texts"):
        prior.read(fresh, np.zeros(2), np.ones(2), [AGAINST_PROBLEM] * 2, prior.tokens_of(new_codes[:1]))
    # The file keeps the vocabulary, and the loaded prior forecasts the same.
    path = tmp_path / "prior.json"
    path.write_text(json.dumps(prior.to_json()))
    prior.save_trees(path.with_name(TREES_FILE))
    loaded = KernelBenchPrior.load(path)
    assert loaded is not None and loaded.vocabulary == vocabulary
    assert loaded.read(fresh, np.zeros(2), np.ones(2), [AGAINST_PROBLEM] * 2, loaded.tokens_of(new_codes))[0] == pytest.approx(centre)


def test_api_tokens_read_a_kernel_held_in_a_python_string() -> None:
    one_line = 'import torch  # tl.sum\nKERNEL = "#include <cuda.h>\\n__global__ void k() { __syncthreads(); }  # for\\n"\n'
    read = api_tokens(one_line)
    assert (read["__global__"], read["__syncthreads"]) == (1, 1), "the literal's kernel is read past its #include line"
    assert "tl.sum" not in read and "for" not in read, "a comment, in the code or in the literal, is not the code's"
    assert api_tokens('import torch\nx = f"{torch.relu}"\ny = b"__global__"\n')["__global__"] == 0, "bytes hold no text"
    unreadable = 'import torch\ns = "unterminated #include\ntorch.relu(x)\n'
    assert api_tokens(unreadable)["torch.relu"] == 1, "text Python cannot tokenize is cut as before"


def test_api_tokens_count_calls_as_written_and_skip_comments() -> None:
    read = api_tokens(WITH_DOT)
    assert (read["tl.dot"], read["tl.load"], read["tl.store"], read["triton.jit"]) == (1, 2, 1, 1)
    assert "tl.sum" not in read, "a comment's call is not the code's"
    cuda = api_tokens("__global__ void k(float* x) {\n  for (int i = threadIdx.x; i < 8; ++i) atomicAdd(x, 1.f);\n  __syncthreads();\n}\n")
    assert (cuda["__global__"], cuda["for"], cuda["threadIdx"], cuda["atomicAdd"], cuda["__syncthreads"]) == (1, 1, 1, 1, 1)
    counts = token_counts([(WITHOUT_DOT, WITH_DOT)], ("tl.dot", "tl.load", "absent"))
    assert counts.shape == (1, 2, 3)
    assert counts[0].ravel().tolist() == pytest.approx([0.0, math.log(3), 0.0, math.log(2), math.log(3), 0.0])

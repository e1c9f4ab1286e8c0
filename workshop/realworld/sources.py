"""The listed public sources of kernels written by others, and how to read each one's files.

Only the sources of `../shared/data/wild/README.md` may be trained and validated on; each is
pinned to one commit. A source is read from a git mirror (`fetch` tool) with `git show`, so
nothing of its code enters this repository: the manifest keeps the path, commit and SHA-256.

Each solution file is a KernelBench-format module (`ModelNew`, and `Model`'s problem next to
it); its problem is the file of the same level and number in `problems_repo` at
`problems_commit` — the solution's own commit wherever the repository carries the problems,
because KernelBench's sizes changed between its versions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SolutionPath:
    """Where a solution file sits: its KernelBench level and problem number, and the run it belongs to."""

    level: int
    problem: int
    run: str


@dataclass(frozen=True)
class Source:
    name: str
    repo: str
    commit: str
    licence: str
    solution: Callable[[str], SolutionPath | None]  # a path in the repository → where it sits, or None: not a solution
    problems_repo: str
    problems_commit: str
    levels: tuple[int, ...] = (1, 2, 3)


def _pattern(regex: str, run_group: str = "run") -> Callable[[str], SolutionPath | None]:
    compiled = re.compile(regex)

    def read(path: str) -> SolutionPath | None:
        found = compiled.fullmatch(path)
        if found is None:
            return None
        groups = found.groupdict()
        return SolutionPath(int(groups["level"]), int(groups["problem"]), groups.get(run_group) or "")

    return read


def _technoabsurdist(path: str) -> SolutionPath | None:
    """Two layouts: `runs/<model>_level<L>_run/level_L_problem_P_sample_0_kernel.py` and
    `runs/opus4_level<L>_<stamp>/problem_P_kernel.py`."""
    return _pattern(r"runs/(?P<run>[^/]+)_level\d_run/level_(?P<level>\d)_problem_(?P<problem>\d+)_sample_\d+_kernel\.py")(
        path
    ) or _pattern(r"runs/(?P<run>opus4_level(?P<level>\d)_[^/]+)/problem_(?P<problem>\d+)_kernel\.py")(path)


SOURCES: tuple[Source, ...] = (
    Source(
        "llmkernel",
        "Alisehen/LLMKernel",
        "d078a38dfe4b331d7fc71ee22a9f013bf151bb73",
        "MIT",
        _pattern(r"results/level(?P<level>\d)/(?P<problem>\d+)_[^/]+/code/(?P<run>kernel_\d+_\d+)\.py"),
        "Alisehen/LLMKernel",
        "d078a38dfe4b331d7fc71ee22a9f013bf151bb73",
    ),
    Source(
        "yenhao-huang",
        "yenhao-huang/KernelBench",
        "62472a673baf4540af8129fa0e531505f4e62c7d",
        "MIT",
        _pattern(r"runs/(?P<run>[^/]+)/generated_kernels/level_(?P<level>\d)/problem_(?P<problem>\d+)\.py"),
        "yenhao-huang/KernelBench",
        "62472a673baf4540af8129fa0e531505f4e62c7d",
    ),
    Source(
        "technoabsurdist",
        "technoabsurdist/KernelBench",
        "9202a5c5786ab959fcaa3b4ce0356348bb87c86a",
        "MIT",
        _technoabsurdist,
        "technoabsurdist/KernelBench",
        "9202a5c5786ab959fcaa3b4ce0356348bb87c86a",
    ),
    Source(
        "eh-kernelbench",
        "yoenoo/eh_kernelbench",
        "fea66b1a201bc5b01458627f43d0bd8506c3878d",
        "MIT",
        _pattern(r"results/level_(?P<level>\d)_problem_(?P<problem>\d+)_(?P<run>sample_\d+)_kernel\.py"),
        # The repository holds no problem files: its README names ScalingIntelligence/KernelBench.
        "ScalingIntelligence/KernelBench",
        "423217d9fda91e0c2d67e4a43bf62f96f6d104f1",
        levels=(1,),
    ),
    Source(
        "hzeng2000",
        "hzeng2000/KernelBench",
        "833e16d179fa5fd2ea8c69f4134658880b841517",
        "MIT",
        # CuTe-DSL and TileLang solutions are left out: the GPU host has neither runtime, so a
        # failure there would say nothing about the kernel.
        _pattern(
            r"runs/(?P<run>level_(?P<level>\d)_backend_(?:cuda|triton)_model_[^/]+)/level_\d_problem_(?P<problem>\d+)_sample_\d+_kernel\.py"
        ),
        "hzeng2000/KernelBench",
        "833e16d179fa5fd2ea8c69f4134658880b841517",
        levels=(2,),
    ),
    Source(
        "kernelbench-inductor",
        "ScalingIntelligence/KernelBench",
        "423217d9fda91e0c2d67e4a43bf62f96f6d104f1",
        "MIT",
        # The problems themselves: torch.compile's kernels against eager, one record per problem.
        _pattern(r"KernelBench/level(?P<level>[123])/(?P<problem>\d+)_[^/]+\.py"),
        "ScalingIntelligence/KernelBench",
        "423217d9fda91e0c2d67e4a43bf62f96f6d104f1",
    ),
)


def by_name(name: str) -> Source:
    for source in SOURCES:
        if source.name == name:
            return source
    raise KeyError(f"no listed source named {name!r}; listed: {', '.join(source.name for source in SOURCES)}")

"""[tool.kernelcast] / kernelcast.toml: lookup, parsing, rules and readable problems."""

from __future__ import annotations

import os
from pathlib import Path

from kernelcast.project_config import NO_CONFIG, load_project_config

PYPROJECT = """\
[project]
name = "demo"

[tool.kernelcast]
target_gpu = "h100"
problem = { N = 16777216 }

[[tool.kernelcast.references]]
files = "kernels/*_v2.cu"
reference = "kernels/baseline.cu::vector_add"
problem = { N = 1048576 }

[[tool.kernelcast.references]]
files = ["triton/**/*.py", "extra.py"]
reference = "triton/base.py"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pyproject_section_and_rules(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", PYPROJECT)
    config = load_project_config(tmp_path / "kernels" / "add_v2.cu", tmp_path)
    assert (config.root, config.target_gpu, config.problem, config.problems) == (tmp_path, "H100-SXM", {"N": 16777216}, ())
    rule = config.rule_for(tmp_path / "kernels" / "add_v2.cu")
    assert rule is not None and rule.reference == "kernels/baseline.cu::vector_add" and rule.problem == {"N": 1048576}
    assert config.rule_for(tmp_path / "kernels" / "deeper" / "add_v2.cu") is None  # `*` stays in one folder
    deep = config.rule_for(tmp_path / "triton" / "a" / "b" / "k.py")
    assert deep is not None and deep.problem == {"N": 16777216}  # defaults apply to a rule without sizes
    assert config.rule_for(tmp_path / "triton" / "k.py") is deep  # `**/` may match no folder
    assert config.rule_for(tmp_path / "extra.py") is deep
    assert config.rule_for(tmp_path.parent / "elsewhere.cu") is None


def test_nearest_config_wins_and_lookup_stops_at_workspace(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", PYPROJECT)
    write(tmp_path / "sub" / "kernelcast.toml", 'target_gpu = "A100"\n')
    write(tmp_path / "sub" / "pyproject.toml", '[tool.kernelcast]\ntarget_gpu = "H200"\n')
    write(tmp_path / "sub" / "inner" / "pyproject.toml", '[project]\nname = "no kernelcast here"\n')
    inner_file = tmp_path / "sub" / "inner" / "k.cu"
    assert load_project_config(inner_file, tmp_path).target_gpu == "A100"  # kernelcast.toml beats pyproject.toml
    assert load_project_config(inner_file, tmp_path / "sub" / "inner") is NO_CONFIG  # not above the workspace
    assert load_project_config(tmp_path / "k.cu", tmp_path).target_gpu == "H100-SXM"


def test_bad_toml_and_bad_values_become_problems(tmp_path: Path) -> None:
    write(tmp_path / "kernelcast.toml", 'target_gpu = "H100"\nproblem = { N = \n')
    broken = load_project_config(tmp_path / "k.cu", tmp_path)
    assert broken.root == tmp_path and len(broken.problems) == 1
    assert broken.problems[0].startswith(f"{tmp_path / 'kernelcast.toml'}: invalid TOML:") and "line 2" in broken.problems[0]

    write(
        tmp_path / "kernelcast.toml",
        'target_gpu = "TPU9000"\ncolour = "blue"\nproblem = { N = -1, M = "big" }\n'
        '[[references]]\nfiles = "*.cu"\n\n[[references]]\nfiles = "*.cu"\nreference = "base.cu"\nextra = 1\n',
    )
    config = load_project_config(tmp_path / "k.cu", tmp_path)
    where = tmp_path / "kernelcast.toml"
    assert config.target_gpu is None and config.problem == {}
    assert config.problems == (
        f"{where}:2: unknown setting 'colour'; known: problem, references, target_gpu",
        f"{where}:1: unknown GPU 'TPU9000'; known targets: H100-SXM, H100-PCIe, H200, A100, L40S, RTX4090, B200, L4, T4, V100",
        f"{where}:3: problem size 'N' must be a positive integer, got -1",
        f"{where}:3: problem size 'M' must be a positive integer, got 'big'",
        f"{where}:4: reference rule 1: `reference` must be a non-empty string `path[::kernel]`",
        f"{where}:7: reference rule 2: unknown key 'extra'; known: files, reference, problem",
    )
    assert [rule.reference for rule in config.references] == ["base.cu"]


def test_parsed_config_is_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = write(tmp_path / "kernelcast.toml", 'target_gpu = "A100"\n')
    first = load_project_config(tmp_path / "k.cu", tmp_path)
    assert load_project_config(tmp_path / "k.cu", tmp_path) is first
    path.write_text('target_gpu = "H200"\n')
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert load_project_config(tmp_path / "k.cu", tmp_path).target_gpu == "H200"

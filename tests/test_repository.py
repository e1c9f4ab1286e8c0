"""What the repository promises a user: a non-editable install (`pip install .`, the code-server
recipe) holds every package of the tree, and CI runs exactly the README's test command."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_folder_with_an_init_under_a_mapped_package_is_listed() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    missing = []
    for package, folder in setuptools["package-dir"].items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            name = ".".join([package, *init.parent.relative_to(ROOT / folder).parts])
            if name not in listed:
                missing.append(name)
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: `pip install .` would leave them out"


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text().split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    test_command = next(line for line in readme if " -m pytest" in line)
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == test_command, "`.ci/run` must end with the README's test command, unchanged"
    assert all(line.startswith(("set ", "cd ")) for line in ci[:-1]), ci

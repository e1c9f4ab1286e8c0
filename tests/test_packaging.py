"""A non-editable install (`pip install .`, the code-server recipe) holds every package of the tree."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def test_every_folder_with_an_init_under_a_mapped_package_is_listed() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    missing = []
    for package, folder in setuptools["package-dir"].items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            name = ".".join([package, *init.parent.relative_to(ROOT / folder).parts])
            if name not in listed:
                missing.append(name)
    assert not missing, f"pyproject.toml [tool.setuptools] packages lacks {missing}: `pip install .` would leave them out"

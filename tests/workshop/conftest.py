"""Tests of the workshop (corpus generator, training, benchmarks' scripts), which is not installed:
marked `workshop` and run after the product's tests (in the README's parallel run, handed out
after them: files go to the workers in this order), so a product failure shows first and
`-m "not workshop"` runs the product alone."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _in_workshop(item: pytest.Item) -> bool:
    return item.path.resolve().is_relative_to(HERE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _in_workshop(item):
            item.add_marker(pytest.mark.workshop)
    items.sort(key=_in_workshop)  # stable: each group keeps its own order

"""Parsing Python on many threads at once, as the language server's workers do."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import warnings

import pytest

from kernelcast.kernels_runtime.source.python_ast import parse_python, parse_python_expression

# Bare ast.parse on CPython 3.11 fails here after about 20 parses per thread: a collection inside
# one thread's tree building lets another thread build its tree, and the shared depth counter trips.
PARSES_PER_THREAD = 40
THREADS = 3


class _Finalized:
    """Garbage whose collection runs Python code, so the interpreter may switch threads mid-parse."""

    def __del__(self) -> None:
        pass


def test_threads_parse_at_once_without_the_interpreter_failing() -> None:
    module = "\n".join(f"def f{i}(x):\n    return [[(a + b) * c for a in range(3)] for b in x if b and (c or d)]" for i in range(100))
    failures: list[BaseException] = []
    parsed: list[int] = []
    done = threading.Event()

    def parse_many() -> None:
        for _ in range(PARSES_PER_THREAD):
            try:
                parsed.append(len(parse_python(module).body))
            except Exception as error:  # noqa: BLE001 — the failure is what this test counts
                failures.append(error)
                return

    def make_cyclic_garbage() -> None:
        while not done.is_set():
            first, second = _Finalized(), _Finalized()
            first.other, second.other = second, first

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    try:
        garbage = threading.Thread(target=make_cyclic_garbage)
        workers = [threading.Thread(target=parse_many) for _ in range(THREADS)]
        garbage.start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        done.set()
        garbage.join()
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    assert failures == []
    assert parsed == [100] * (PARSES_PER_THREAD * THREADS)


def test_syntax_errors_raise_and_syntax_warnings_stay_quiet() -> None:
    with pytest.raises(SyntaxError):
        parse_python("def (")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert parse_python('x = "\\d"').body  # ast.parse warns of the invalid escape
    assert caught == []
    assert isinstance(parse_python_expression("a if b else c"), ast.IfExp)

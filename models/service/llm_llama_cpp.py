"""`llama-cpp` backend: a local GGUF model through llama-cpp-python, on CPU or GPU.

One Llama object is kept for the life of the server, and its KV cache with it: each
request evaluates only the tokens after the longest prefix it shares with the
previous one (prompt.py orders sections for that), then reads the 8 answer-token
logits of the last position — one forward pass, no sampling, no `logits_all`.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from kernelcast.models import prediction
from kernelcast.models.service.llm_common import LLMBackendError, label_token_ids, predict_from_last_logits, shared_prefix_length
from kernelcast.paths import install_command
from kernelcast.wire import ForecastRequest

DEFAULT_CONTEXT_TOKENS = 8192
PORTABLE_BUILD = "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python"
INSTALL_HINT = f"{install_command('llama')} (llama-cpp-python builds from source; portable build: {PORTABLE_BUILD})"


def refuse_an_amx_build(system_info: str) -> None:
    """Raise, saying how to rebuild, when llama.cpp was compiled with AMX matrix tiles.

    A native build on an AMX CPU (Intel Sapphire Rapids and later) repacks quantized
    weights into AMX buffers, and the first decode after that repack can die with a
    segfault in ggml_backend_amx_mul_mat (llama.cpp issue 20824). A segfault takes the
    language server down with it, so a clear refusal is better; a build with
    GGML_NATIVE=OFF uses AVX2 kernels instead and has no AMX code.
    """
    if "AMX_INT8 = 1" in system_info:
        raise LLMBackendError(
            "this llama-cpp-python build uses AMX matrix tiles, whose quantized matmul can crash the process "
            f"(llama.cpp issue 20824); rebuild it without them: {PORTABLE_BUILD}"
        )


def default_threads() -> int:
    """One thread fewer than the CPUs this process may run on (its affinity), and at least one.

    llama.cpp's threads meet at a barrier after every operation, so a forecast goes at the
    pace of its slowest thread; with a thread on every core, the editor, the language server
    and its compilers take one of them away and all the others wait. On a 2-core machine at
    load 4 a forecast took 7.35 s with 1 thread and 21.8 s with 2.
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on macOS and Windows
        usable = os.cpu_count() or 1
    return max(1, usable - 1)


class LlamaCppBackend:
    name = "llama-cpp"
    version = "1"

    def __init__(self, gguf_path: str | os.PathLike[str], n_ctx: int = DEFAULT_CONTEXT_TOKENS, n_threads: int | None = None) -> None:
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as error:
            raise LLMBackendError(f"llama-cpp-python is not importable ({error}); {INSTALL_HINT}") from error
        path = Path(gguf_path).expanduser()
        if not path.is_file():
            raise LLMBackendError(f"GGUF model not found: {path}")
        refuse_an_amx_build(llama_cpp.llama_print_system_info().decode("utf-8", "replace"))
        self.model_id = path.name
        self._llama_cpp_version = llama_cpp.__version__
        self._threads = n_threads or default_threads()
        self._llm = llama_cpp.Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=self._threads, n_threads_batch=self._threads, verbose=False
        )
        self._lock = threading.Lock()  # one KV cache: requests from the service's thread pool take turns
        template = self._llm.metadata.get("tokenizer.chat_template")
        self._bos = self._token_text(self._llm.token_bos())
        self._formatter = (
            Jinja2ChatFormatter(template=template, eos_token=self._token_text(self._llm.token_eos()), bos_token=self._bos)
            if template
            else None
        )
        context = self._render([{"role": "system", "content": "."}, {"role": "user", "content": "."}])
        self.labels, self._label_ids = label_token_ids(self._tokenize, context)

    def _token_text(self, token: int) -> str:
        return self._llm.detokenize([token], special=True).decode("utf-8", "replace") if token >= 0 else ""

    def _render(self, messages: list[dict[str, str]]) -> str:
        """The model's own chat template, ending where the assistant's answer starts."""
        if self._formatter is None:
            return "\n\n".join(message["content"] for message in messages) + "\n\nBin: "
        return self._formatter(messages=messages).prompt

    def _tokenize(self, text: str) -> list[int]:
        add_bos = not (self._bos and text.startswith(self._bos))
        return self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def status(self) -> prediction.BackendStatus:
        return prediction.BackendStatus(
            True, f"{self.model_id} via llama-cpp-python {self._llama_cpp_version}, {self._threads} threads, n_ctx {self._llm.n_ctx()}"
        )

    def _last_logits(self, tokens: list[int]) -> tuple[Any, int]:
        """Logits after `tokens`, evaluating only what the KV cache does not already hold."""
        import numpy as np

        if len(tokens) >= self._llm.n_ctx():
            raise LLMBackendError(f"prompt has {len(tokens)} tokens, over the context of {self._llm.n_ctx()}; raise n_ctx")
        # At least the last token is evaluated again: its logits are not kept between calls.
        reused = min(shared_prefix_length(self._llm.input_ids[: self._llm.n_tokens].tolist(), tokens), len(tokens) - 1)
        self._llm.n_tokens = reused  # eval() drops KV entries from here on
        self._llm.eval(tokens[reused:])
        logits = np.ctypeslib.as_array(self._llm._ctx.get_logits(), shape=(self._llm.n_vocab(),)).copy()
        return logits, reused

    def predict(self, request: ForecastRequest) -> prediction.RawPrediction:
        return predict_from_last_logits(self, request)


def create(options: dict[str, Any]) -> LlamaCppBackend:
    """Factory for the registry: options `gguf` (path), `n_ctx`, `n_threads` (default: `default_threads()`)."""
    gguf = options.get("gguf") or os.environ.get("KERNELCAST_GGUF")
    if not gguf:
        raise LLMBackendError("the llama-cpp backend needs a GGUF model: --gguf PATH (or KERNELCAST_GGUF)")
    return LlamaCppBackend(gguf, int(options.get("n_ctx") or DEFAULT_CONTEXT_TOKENS), options.get("n_threads"))

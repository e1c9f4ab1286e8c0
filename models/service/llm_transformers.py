"""`transformers` backend: a local Hugging Face checkpoint (+ optional PEFT LoRA adapter).

For fine-tuned forecasters that exist as HF checkpoints before anyone converts them
to GGUF. Loads from disk only (never the hub), reads the 8 answer-token logits of
the next position, and keeps the previous request's KV cache, cropped to the shared
prefix, so an edit near the end of the candidate re-uses the rest.
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

INSTALL_HINT = install_command("hf")


class TransformersBackend:
    name = "transformers"
    version = "1"

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        adapter_dir: str | os.PathLike[str] | None = None,
        device: str | None = None,
        gguf_file: str | None = None,
    ) -> None:
        """`gguf_file` (a file name in `model_dir`) loads a GGUF, dequantised by transformers (needs `gguf`)."""
        try:
            import torch
            import transformers
        except ImportError as error:
            raise LLMBackendError(f"transformers/torch are not importable ({error}); {INSTALL_HINT}") from error
        model_path = Path(model_dir).expanduser()
        if not (model_path / (gguf_file or "config.json")).is_file():
            raise LLMBackendError(f"not a Hugging Face checkpoint (no {gguf_file or 'config.json'}): {model_path}")
        self._torch = torch
        self._device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        source = {"local_files_only": True, "gguf_file": gguf_file} if gguf_file else {"local_files_only": True}
        self._tokenizer = transformers.AutoTokenizer.from_pretrained(model_path, **source)
        model = transformers.AutoModelForCausalLM.from_pretrained(model_path, dtype="auto", **source)
        self.model_id = gguf_file or model_path.name
        if adapter_dir:
            try:
                from peft import PeftModel
            except ImportError as error:
                raise LLMBackendError(f"a LoRA adapter needs peft ({error}); {INSTALL_HINT}") from error
            model = PeftModel.from_pretrained(model, str(Path(adapter_dir).expanduser()), local_files_only=True)
            self.model_id += f"+{Path(adapter_dir).name}"
        self._model = model.to(self._device).eval()
        self._versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
        self._lock = threading.Lock()  # one KV cache: requests take turns
        self._cached_tokens: list[int] = []
        self._cache: Any = None
        context = self._render([{"role": "system", "content": "."}, {"role": "user", "content": "."}])
        self.labels, self._label_ids = label_token_ids(self._tokenize, context)

    def _render(self, messages: list[dict[str, str]]) -> str:
        """The checkpoint's chat template, ending where the assistant's answer starts."""
        if self._tokenizer.chat_template is None:
            return "\n\n".join(message["content"] for message in messages) + "\n\nBin: "
        return self._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def _tokenize(self, text: str) -> list[int]:
        return list(self._tokenizer(text, add_special_tokens=self._tokenizer.chat_template is None)["input_ids"])

    def status(self) -> prediction.BackendStatus:
        return prediction.BackendStatus(True, f"{self.model_id} on {self._device} via {self._versions}")

    def _last_logits(self, tokens: list[int]) -> tuple[Any, int]:
        """Next-token logits after `tokens`, feeding only what the kept KV cache lacks."""
        torch = self._torch
        reused = min(shared_prefix_length(self._cached_tokens, tokens), len(tokens) - 1) if self._cache is not None else 0
        cache = self._cache
        if reused and hasattr(cache, "crop"):
            surplus = cache.get_seq_length() - reused
            if surplus > 0:
                cache.crop(-surplus)  # negative: "remove this many" in transformers 4.x and 5.x alike
        else:
            reused, cache = 0, None
        with torch.inference_mode():
            fresh = torch.tensor([tokens[reused:]], device=self._device)
            output = self._model(input_ids=fresh, past_key_values=cache, use_cache=True, logits_to_keep=1)
        self._cache, self._cached_tokens = output.past_key_values, tokens
        return output.logits[0, -1].float().cpu().numpy(), reused

    def predict(self, request: ForecastRequest) -> prediction.RawPrediction:
        return predict_from_last_logits(self, request)


def create(options: dict[str, Any]) -> TransformersBackend:
    """Factory for the registry: options `hf_model` (dir), `hf_adapter` (dir), `hf_device`, `hf_gguf_file`."""
    model_dir = options.get("hf_model") or os.environ.get("KERNELCAST_HF_MODEL")
    if not model_dir:
        raise LLMBackendError("the transformers backend needs a local checkpoint: --hf-model DIR (or KERNELCAST_HF_MODEL)")
    return TransformersBackend(model_dir, options.get("hf_adapter"), options.get("hf_device"), options.get("hf_gguf_file"))

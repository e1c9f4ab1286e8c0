"""`openai` backend: any OpenAI-compatible server (vLLM, SGLang, Ollama /v1, llama-server, llama_cpp.server).

Servers differ in what they support, so each URL is probed once (cached per process)
for logprobs and for schema-constrained JSON. With logprobs, the distribution is read
from the top logprobs of a one-token answer: the 8 bin labels' probabilities,
renormalised. Without them, the model is asked for a JSON distribution, constrained
by the server's schema support where it has any.

Every call runs under a total deadline with bounded, backed-off retries for transient
failures (connection refused, 5xx, 429), so a dead or overloaded server costs the
editor a clear error, never a hang; a probe takes a 500 for the server's answer.
vLLM serves LoRA adapters as model names: pick one with `llm_model`.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from kernelcast.models import prediction
from kernelcast.models.service.llm_common import LLMBackendError, parse_json_distribution
from kernelcast.models.service.prompt import DIGIT_LABELS, answer_after_reasoning_text, build_prompt, distribution_schema
from kernelcast.wire import ForecastRequest

MODES = ("auto", "logprobs", "json", "reason")
DEFAULT_DEADLINE_S = 120.0
DEFAULT_RETRIES = 2
PROBE_DEADLINE_S = 20.0
TOP_LOGPROBS = 20  # OpenAI's maximum; enough for 8 labels from a model that means to answer
JSON_MAX_TOKENS = 200
REASON_MAX_TOKENS = 512
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# A probe's HTTP 500 is the server's answer, not a passing fault: llama_cpp.server fails a logprobs
# request so when it runs without logits_all. Retrying it only put off the first forecast (3 s).
_PROBE_RETRY_STATUS = _RETRY_STATUS - {500}


@dataclass(frozen=True)
class ServerCapabilities:
    model: str
    logprobs: bool
    json_format: str  # json_schema | json_object | prompt (no constraint)

    def describe(self) -> str:
        return f"model {self.model}; logprobs {'yes' if self.logprobs else 'no'}; JSON via {self.json_format}"


_CAPABILITIES: dict[tuple[str, str | None], ServerCapabilities] = {}
_CAPABILITIES_LOCK = threading.Lock()


class OpenAICompatibleBackend:
    name = "openai"
    version = "1"

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        mode: str = "auto",
        deadline_s: float = DEFAULT_DEADLINE_S,
        retries: int = DEFAULT_RETRIES,
        reason_tokens: int = REASON_MAX_TOKENS,
    ) -> None:
        import httpx

        if mode not in MODES:
            raise LLMBackendError(f"llm mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self._configured_model = model
        self.model_id = model or "(server default)"
        self.mode = mode
        self.deadline_s = deadline_s
        self.retries = retries
        self.reason_tokens = reason_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers)
        self._httpx = httpx

    # --- HTTP with a deadline ---------------------------------------------------------

    def _call(
        self, method: str, path: str, deadline: float, body: dict[str, Any] | None = None, retry_status: frozenset[int] = _RETRY_STATUS
    ) -> dict[str, Any]:
        """One API call, retried on the failures that pass (connection errors, `retry_status`), never past `deadline` (monotonic)."""
        last_problem = "no attempt made"
        for attempt in range(self.retries + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                response = self._client.request(
                    method, path, json=body, timeout=self._httpx.Timeout(remaining, connect=min(remaining, 5.0))
                )
            except self._httpx.TransportError as error:
                last_problem = f"{type(error).__name__}: {error}"
            else:
                if response.status_code < 400:
                    return response.json()
                last_problem = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in retry_status:
                    raise LLMBackendError(f"{self.base_url}{path} refused the request: {last_problem}")
            if attempt < self.retries:
                time.sleep(max(0.0, min(0.5 * 2**attempt, deadline - time.monotonic())))
        raise LLMBackendError(f"{self.base_url}{path} did not answer within {self.retries + 1} attempts / the deadline: {last_problem}")

    def _chat(
        self, deadline: float, model: str, messages: list[dict[str, str]], retry_status: frozenset[int] = _RETRY_STATUS, **fields: Any
    ) -> dict[str, Any]:
        body = {"model": model, "messages": messages, "temperature": 0.0, "seed": 0, **fields}
        return self._call("POST", "/chat/completions", deadline, body, retry_status)

    # --- probing ----------------------------------------------------------------------

    def capabilities(self) -> ServerCapabilities:
        """What this server supports, probed once per (URL, model) and cached."""
        key = (self.base_url, self._configured_model)
        with _CAPABILITIES_LOCK:
            if key not in _CAPABILITIES:
                _CAPABILITIES[key] = self._probe(time.monotonic() + PROBE_DEADLINE_S)
            return _CAPABILITIES[key]

    def _probe(self, deadline: float) -> ServerCapabilities:
        listing = self._call("GET", "/models", deadline)
        served = [entry.get("id") for entry in listing.get("data") or [] if isinstance(entry, dict)]
        model = self._configured_model or (served[0] if served else None)
        if not model:
            raise LLMBackendError(f"{self.base_url} lists no model; set llm_model")
        if self._configured_model and served and self._configured_model not in served:
            raise LLMBackendError(f"{self.base_url} does not serve {model!r}; it serves: {', '.join(map(str, served))}")
        probe_messages = [{"role": "user", "content": "Reply with the digit 1."}]
        try:
            reply = self._chat(deadline, model, probe_messages, _PROBE_RETRY_STATUS, max_tokens=1, logprobs=True, top_logprobs=5)
            logprobs = bool(_first_token_alternatives(reply))
        except LLMBackendError:
            logprobs = False
        json_format = "prompt"
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        for candidate, response_format in (
            ("json_schema", {"type": "json_schema", "json_schema": {"name": "probe", "schema": schema}}),
            ("json_object", {"type": "json_object", "schema": schema}),
        ):
            try:
                self._chat(
                    deadline,
                    model,
                    [{"role": "user", "content": 'Answer {"ok": true}'}],
                    _PROBE_RETRY_STATUS,
                    max_tokens=12,
                    response_format=response_format,
                )
            except LLMBackendError:
                continue
            json_format = candidate
            break
        return ServerCapabilities(model=model, logprobs=logprobs, json_format=json_format)

    def status(self) -> prediction.BackendStatus:
        try:
            return prediction.BackendStatus(True, f"{self.base_url}: {self.capabilities().describe()}")
        except LLMBackendError as error:
            return prediction.BackendStatus(False, str(error))

    # --- forecasting ------------------------------------------------------------------

    def predict(self, request: ForecastRequest) -> prediction.RawPrediction:
        deadline = time.monotonic() + self.deadline_s
        capabilities = self.capabilities()
        self.model_id = capabilities.model
        mode = self.mode
        if mode == "auto":
            mode = "logprobs" if capabilities.logprobs else "json"
        if mode in ("logprobs", "reason") and not capabilities.logprobs:
            raise LLMBackendError(f"{self.base_url} returns no logprobs; use llm mode 'json' or 'auto'")
        if mode == "json":
            return self._json_prediction(request, capabilities, deadline, {})
        messages = build_prompt(request, DIGIT_LABELS, answer="reason" if mode == "reason" else "label").messages()
        details: dict[str, Any] = {"readout": "top_logprobs", "mode": mode}
        if mode == "reason":
            reasoning = self._chat(deadline, capabilities.model, messages, max_tokens=self.reason_tokens)
            message = reasoning["choices"][0]["message"]
            # vLLM/SGLang reasoning parsers move the thinking out of `content`.
            thought = message.get("content") or message.get("reasoning_content") or ""
            messages = [
                *messages,
                {"role": "assistant", "content": thought},
                {"role": "user", "content": answer_after_reasoning_text(DIGIT_LABELS)},
            ]
            details["reasoning_chars"] = len(thought)
        reply = self._chat(deadline, capabilities.model, messages, max_tokens=1, logprobs=True, top_logprobs=TOP_LOGPROBS)
        probabilities, readout = label_probabilities(_first_token_alternatives(reply), DIGIT_LABELS)
        details.update(readout)
        if probabilities is None:
            # The model did not want to answer with a label at all (e.g. it opened a <think> block).
            return self._json_prediction(request, capabilities, deadline, {**details, "fallback": "no bin label among top logprobs"})
        return prediction.RawPrediction(probabilities=probabilities, details=details)

    def _json_prediction(
        self, request: ForecastRequest, capabilities: ServerCapabilities, deadline: float, details: dict[str, Any]
    ) -> prediction.RawPrediction:
        fields: dict[str, Any] = {"max_tokens": JSON_MAX_TOKENS}
        if capabilities.json_format == "json_schema":
            fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "bins", "schema": distribution_schema()}}
        elif capabilities.json_format == "json_object":
            fields["response_format"] = {"type": "json_object", "schema": distribution_schema()}
        messages = build_prompt(request, DIGIT_LABELS, answer="json").messages()
        reply = self._chat(deadline, capabilities.model, messages, **fields)
        text = reply["choices"][0]["message"].get("content") or ""
        probabilities, parsed = parse_json_distribution(text)
        details = {**details, "readout": "json", "json_format": capabilities.json_format, **parsed}
        if probabilities is None:
            raise LLMBackendError(f"{capabilities.model} answered no usable distribution ({parsed['parse_failure']})")
        return prediction.RawPrediction(probabilities=probabilities, details=details)


def _first_token_alternatives(reply: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return list(reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"] or [])
    except (KeyError, IndexError, TypeError):
        return []


def label_probabilities(alternatives: list[dict[str, Any]], labels: tuple[str, ...]) -> tuple[list[float] | None, dict[str, Any]]:
    """Bin probabilities from a one-token answer's top logprobs, renormalised over the labels.

    " 5" and "5" both count for bin 5. A label outside the top-k gets the smallest
    listed probability: an upper bound on its share, so no bin is ever ruled out.
    """
    mass = dict.fromkeys(labels, 0.0)
    listed: list[float] = []
    for alternative in alternatives:
        probability = math.exp(float(alternative.get("logprob", -math.inf)))
        listed.append(probability)
        token = str(alternative.get("token", "")).strip()
        if token in mass:
            mass[token] += probability
    label_mass = sum(mass.values())
    if label_mass <= 0:
        return None, {"label_mass": 0.0}
    missing = [label for label, value in mass.items() if value == 0.0]
    floor = min(listed)
    values = [mass[label] or floor for label in labels]
    total = sum(values)
    return [value / total for value in values], {"label_mass": round(label_mass, 4), "labels_missing": missing}


def create(options: dict[str, Any]) -> OpenAICompatibleBackend:
    """Factory for the registry; options `llm_url`, `llm_model`, `llm_api_key`, `llm_mode`, `llm_deadline_s`,
    `llm_retries`, `llm_reason_tokens`."""
    url = options.get("llm_url") or os.environ.get("KERNELCAST_LLM_URL")
    if not url:
        raise LLMBackendError("the openai backend needs a server: --llm-url http://127.0.0.1:8000/v1 (or KERNELCAST_LLM_URL)")
    if not re.match(r"^https?://", url):
        raise LLMBackendError(f"llm_url must start with http:// or https://, got {url!r}")
    return OpenAICompatibleBackend(
        url,
        model=options.get("llm_model"),
        api_key=options.get("llm_api_key") or os.environ.get("KERNELCAST_LLM_API_KEY"),
        mode=options.get("llm_mode") or "auto",
        deadline_s=float(options.get("llm_deadline_s") or DEFAULT_DEADLINE_S),
        retries=int(options.get("llm_retries", DEFAULT_RETRIES)),
        reason_tokens=int(options.get("llm_reason_tokens") or REASON_MAX_TOKENS),
    )

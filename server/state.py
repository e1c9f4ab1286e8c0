"""The language server object and the state every feature reads."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import PositionCodec

from kernelcast import __version__, paths
from kernelcast.analysis import FileAnalysis
from kernelcast.cache import ResultCache
from kernelcast.kernels_runtime.hardware import GpuSpec, resolve_target
from kernelcast.project_config import target_gpu_for
from kernelcast.server.scheduler import FileScheduler
from kernelcast.server.service_client import ForecasterClient
from kernelcast.settings import Settings, SettingsState, parse_settings

logger = logging.getLogger(__name__)

STATUS_NOTIFICATION = "kernelcast/status"


class KernelcastServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("kernelcast", __version__)
        self.settings_state = SettingsState()
        self.analyses: dict[str, FileAnalysis] = {}
        self.scheduler: FileScheduler | None = None
        self._cache: ResultCache | None = None
        self._client: ForecasterClient | None = None
        self._hardware: dict[str, GpuSpec] = {}
        self.measuring = 0
        self.last_error: str | None = None

    # --- settings ------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.settings_state.current

    def apply_settings(self, raw: Any) -> list[str]:
        """Merge client settings; returns readable problems for values that were ignored."""
        before = self.settings
        settings, problems = parse_settings(raw, before)
        self.settings_state = SettingsState(settings, problems)
        if settings.cache_dir != before.cache_dir and self._cache is not None:
            self._cache.close()
            self._cache = None
        if (settings.forecaster_url, settings.forecaster_backend, settings.forecaster_timeout_ms) != (
            before.forecaster_url,
            before.forecaster_backend,
            before.forecaster_timeout_ms,
        ):
            self._client = None
        return problems

    # --- shared services, created on first need so start-up stays fast -------------------

    @property
    def cache(self) -> ResultCache:
        if self._cache is None:
            self._cache = ResultCache(paths.cache_path(self.settings.cache_dir or None))
            self.report_cache_problems()
        return self._cache

    def report_cache_problems(self) -> None:
        """Show each new cache problem once (unusable folder, full disk, read-only files)."""
        if self._cache is not None:
            for warning in self._cache.new_warnings():
                self.show_message(warning, types.MessageType.Warning)

    @property
    def client(self) -> ForecasterClient:
        if self._client is None:
            self._client = ForecasterClient(
                paths.service_dir(),
                self.settings.forecaster_url,
                self.settings.forecaster_backend,
                self.settings.forecaster_timeout_ms / 1000,
            )
        return self._client

    def hardware(self, path: Path) -> tuple[GpuSpec, str | None]:
        """The GPU forecasts for `path` are for (project_config.target_gpu_for) and, if the
        setting was bad, why it was ignored."""
        problem = None
        explicit = self.settings.target_gpu or None
        if explicit is not None and explicit not in self._hardware:
            try:
                self._hardware[explicit] = resolve_target(explicit)
            except KeyError as error:
                problem = f"setting kernelcast.targetGpu ignored: {error.args[0]}"
                explicit = None
        target = target_gpu_for(path, self.workspace_root(), explicit)
        key = target or ""
        if key not in self._hardware:
            self._hardware[key] = resolve_target(target)
        return self._hardware[key], problem

    # --- documents -----------------------------------------------------------------------

    @property
    def codec(self) -> PositionCodec:
        return self.workspace.position_codec

    def workspace_root(self) -> Path | None:
        root = self.workspace.root_path
        return Path(root) if root else None

    @staticmethod
    def path_of(uri: str) -> Path:
        return Path(to_fs_path(uri) or uri)

    def document(self, uri: str) -> TextDocument | None:
        """The open document `uri` names. pygls keys them by the unquoted URI while clients
        send quoted ones (`%20` for a space), so a plain lookup misses every such file."""
        return self.workspace.text_documents.get(unquote(uri))

    def open_uris(self) -> list[str]:
        """The open documents' URIs as the client wrote them (the keys are unquoted)."""
        return [document.uri for document in self.workspace.text_documents.values()]

    def current_analysis(self, uri: str) -> FileAnalysis | None:
        """The finished analysis of the document's current text, if there is one."""
        analysis = self.analyses.get(uri)
        if analysis is None:
            return None
        document = self.document(uri)
        if document is not None and document.version is not None and analysis.version != document.version:
            return None
        return analysis

    # --- messages to the client ----------------------------------------------------------

    def show_message(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def send_status(self, message: str | None = None) -> None:
        pending = self.scheduler.pending() if self.scheduler else 0
        if self.last_error:
            state = "error"
        elif self.measuring:
            state = "measuring"
        elif pending:
            state = "forecasting"
        else:
            state = "idle"
        params: dict[str, Any] = {"state": state, "pending": pending, "time": time.time()}
        if message or self.last_error:
            params["message"] = message or self.last_error
        self.protocol.notify(STATUS_NOTIFICATION, params)

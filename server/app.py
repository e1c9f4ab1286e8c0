"""Builds the server: registers each feature module's handler and the settings flow."""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types

from kernelcast.server import code_actions, commands, diagnostics, hover, inlay_hints
from kernelcast.server.file_task import analyse_and_forecast
from kernelcast.server.scheduler import FileScheduler
from kernelcast.server.state import KernelcastServer
from kernelcast.settings import SECTION

logger = logging.getLogger(__name__)


def create_server() -> KernelcastServer:
    ls = KernelcastServer()

    def ensure_scheduler() -> FileScheduler:
        if ls.scheduler is None:
            ls.scheduler = FileScheduler(lambda uri: analyse_and_forecast(ls, uri), ls.send_status, analysis_failed)
        return ls.scheduler

    def analysis_failed(uri: str, error: Exception) -> None:
        ls.last_error = f"kernelcast could not analyse {ls.path_of(uri).name}: {type(error).__name__}: {error} (see the server log)"

    def report(problems: list[str]) -> None:
        for problem in problems:
            ls.show_message(problem, types.MessageType.Warning)

    def forget_finished_notifications() -> None:
        # pygls 2.1 files a Future under a fresh id for every notification handled by its
        # generator built-ins (didOpen/didChange/…) and never removes it: ~1 KB per
        # keystroke. Finished entries are safe to drop; pending requests stay.
        futures = ls.protocol._request_futures
        for key in [key for key, future in futures.items() if future.done()]:
            futures.pop(key, None)

    def reschedule_all() -> None:
        for uri in ls.open_uris():
            ensure_scheduler().schedule(uri, 0)

    @ls.feature(types.INITIALIZE)
    def on_initialize(params: types.InitializeParams) -> None:
        ls.apply_settings(params.initialization_options)

    @ls.feature(types.INITIALIZED)
    async def on_initialized(params: types.InitializedParams) -> None:
        report(ls.settings_state.problems)
        await pull_configuration()

    async def pull_configuration() -> None:
        workspace = ls.client_capabilities.workspace
        if not (workspace and workspace.configuration):
            return
        try:
            answer = await ls.workspace_configuration_async(types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)]))
        except Exception as error:  # a client that fails the request keeps the settings it sent
            logger.warning("workspace/configuration failed: %s", error)
            return
        if answer and answer[0] is not None:
            report(ls.apply_settings(answer[0]))

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def on_configuration(params: types.DidChangeConfigurationParams) -> None:
        if params.settings:
            report(ls.apply_settings(params.settings))
        await pull_configuration()
        reschedule_all()
        if not ls.settings.enable:
            for uri in ls.open_uris():
                diagnostics.clear(ls, uri)

    @ls.feature(types.SHUTDOWN)
    def on_shutdown(params: None) -> None:
        # Nothing may be published once the client has asked us to stop.
        if ls.scheduler is not None:
            ls.scheduler.cancel_all()

    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def on_open(params: types.DidOpenTextDocumentParams) -> None:
        ensure_scheduler().schedule(params.text_document.uri, 0)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def on_change(params: types.DidChangeTextDocumentParams) -> None:
        forget_finished_notifications()
        ensure_scheduler().schedule(params.text_document.uri, ls.settings.debounce_ms / 1000)

    @ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def on_save(params: types.DidSaveTextDocumentParams) -> None:
        # Saving can change the git/config context (e.g. a committed reference).
        ensure_scheduler().schedule(params.text_document.uri, ls.settings.debounce_ms / 1000)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def on_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ensure_scheduler().cancel(uri)
        ls.analyses.pop(uri, None)
        diagnostics.clear(ls, uri)

    ls.feature(types.TEXT_DOCUMENT_INLAY_HINT, types.InlayHintOptions(resolve_provider=False))(
        lambda params: inlay_hints.inlay_hints(ls, params)
    )
    ls.feature(types.TEXT_DOCUMENT_HOVER)(lambda params: hover.hover(ls, params))
    ls.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )(lambda params: code_actions.code_actions(ls, params))

    @ls.command("kernelcast.measure")
    async def measure(*arguments: Any) -> Any:
        return await commands.measure(ls, _flatten_arguments(arguments))

    @ls.command("kernelcast.setReference")
    async def set_reference(*arguments: Any) -> Any:
        return await commands.set_reference(ls, _flatten_arguments(arguments))

    @ls.command("kernelcast.clearCache")
    async def clear_cache(*arguments: Any) -> Any:
        return await commands.clear_cache(ls, _flatten_arguments(arguments))

    return ls


def _flatten_arguments(arguments: tuple[Any, ...]) -> list[Any]:
    """pygls passes the arguments list either spread or as one list, by version."""
    if len(arguments) == 1 and isinstance(arguments[0], list):
        return arguments[0]
    return list(arguments)


def run_stdio() -> None:
    # stderr is the editor's log: our own messages, and only problems from pygls.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kernelcast").setLevel(logging.INFO)
    create_server().start_io()

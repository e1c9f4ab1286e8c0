// Wires the pure modules to VS Code: starts the language client when a kernel
// file is opened, shows the server's status, and contributes the commands.

import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  ErrorHandler,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  Middleware,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { DOCUMENT_SELECTOR, wantsServer } from './activation';
import {
  checkKernelcast,
  checkoutProblem,
  describeLaunchProblem,
  Interpreter,
  LaunchProblem,
  pipInstallCommandLine,
  PythonEnvironmentsApi,
  resolveInterpreter,
  serverLaunch,
} from './interpreter';
import { ArgumentSources, commandsToRegisterOnClient, completeArguments, MEASURE } from './serverCommands';
import { buildServerSettings, needsRestart, SECTION, toggleInlayHints } from './settings';
import {
  describeStatus,
  INITIAL_STATUS,
  nextStatus,
  STATUS_NOTIFICATION,
  StatusEvent,
  StatusModel,
  StatusSeverity,
} from './status';

const PYTHON_EXTENSION_ID = 'ms-python.python';
/** Context key that shows the server-backed commands in the palette only while they can work. */
const RUNNING_CONTEXT = 'kernelcast.serverRunning';
/** Not in the palette: the language status item's link. */
const STATUS_ACTIONS_COMMAND = 'kernelcast.statusActions';

type PythonEnvironments = PythonEnvironmentsApi & {
  onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
};

async function pythonEnvironments(): Promise<PythonEnvironments | undefined> {
  const extension = vscode.extensions.getExtension<{ environments?: PythonEnvironments }>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  const api = extension.isActive ? extension.exports : await extension.activate();
  return api?.environments;
}

/**
 * Until `initialize` is answered, a dying server is reported once (by launch), not restarted in a
 * loop; afterwards the client's own policy applies (restart up to 4 times in 3 minutes).
 */
function startupAwareErrorHandler(hasStarted: () => boolean, defaultHandler: () => ErrorHandler): ErrorHandler {
  let policy: ErrorHandler | undefined;
  const running = () => (policy ??= defaultHandler());
  return {
    error: (error, message, count) =>
      hasStarted() ? running().error(error, message, count) : { action: ErrorAction.Continue, handled: true },
    closed: () => (hasStarted() ? running().closed() : { action: CloseAction.DoNotRestart, handled: true }),
  };
}

const SEVERITIES: Record<StatusSeverity, vscode.LanguageStatusSeverity> = {
  information: vscode.LanguageStatusSeverity.Information,
  warning: vscode.LanguageStatusSeverity.Warning,
  error: vscode.LanguageStatusSeverity.Error,
};

class KernelcastExtension {
  private readonly output = vscode.window.createOutputChannel('kernelcast');
  private statusItem: vscode.LanguageStatusItem | undefined;
  private status: StatusModel = INITIAL_STATUS;
  private client: LanguageClient | undefined;
  private interpreter: Interpreter | undefined;
  /** Disposed with each client: notification handlers, fallback commands, watchers. */
  private session: vscode.Disposable[] = [];
  private starting: Promise<void> | undefined;
  /** Set once a document needed the server; later documents and failures do not retry on their own. */
  private wanted = false;

  private readonly argumentSources: ArgumentSources = {
    cursor: () => {
      const editor = vscode.window.activeTextEditor;
      if (!editor) {
        void vscode.window.showInformationMessage('kernelcast: put the cursor inside a kernel first.');
        return undefined;
      }
      const { line, character } = editor.selection.active;
      return { uri: editor.document.uri.toString(), position: { line, character } };
    },
    askReference: async () =>
      vscode.window.showInputBox({
        title: 'kernelcast: reference kernel',
        prompt: 'Path of the kernel to compare against (absolute, or relative to the workspace)',
        placeHolder: 'kernels/baseline.cu',
        ignoreFocusOut: true,
        validateInput: (value) => (value.trim() ? undefined : 'Enter a path'),
      }),
  };

  constructor(private readonly context: vscode.ExtensionContext) {}

  activate(): void {
    const { commands, workspace } = vscode;
    this.context.subscriptions.push(
      this.output,
      commands.registerCommand('kernelcast.measureKernelUnderCursor', () => this.measureKernelUnderCursor()),
      commands.registerCommand('kernelcast.restartServer', () => this.restart()),
      commands.registerCommand('kernelcast.showLog', () => this.output.show(true)),
      commands.registerCommand('kernelcast.toggleInlayHints', () => this.toggleInlayHints()),
      commands.registerCommand(STATUS_ACTIONS_COMMAND, () => this.pickStatusAction()),
      workspace.onDidOpenTextDocument((document) => this.considerDocument(document)),
      // Saving catches a Python file that only now imports triton.
      workspace.onDidSaveTextDocument((document) => this.considerDocument(document)),
      workspace.onDidChangeConfiguration((event) => {
        if (this.wanted && needsRestart((section) => event.affectsConfiguration(section))) {
          void this.restart();
        }
      }),
    );
    vscode.workspace.textDocuments.forEach((document) => this.considerDocument(document));
  }

  async deactivate(): Promise<void> {
    await this.stop();
  }

  private considerDocument(document: vscode.TextDocument): void {
    if (!this.wanted && wantsServer(document)) {
      this.wanted = true;
      void this.start();
    }
  }

  private start(): Promise<void> {
    this.starting ??= this.launch().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async restart(): Promise<void> {
    await this.starting;
    await this.stop();
    this.wanted = true;
    await this.start();
  }

  private async resolveInterpreter(): Promise<Interpreter> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    return resolveInterpreter({
      configuredPython: vscode.workspace.getConfiguration(SECTION).get<string>('python', ''),
      workspaceFolder: folder?.uri.fsPath,
      pythonEnvironments,
      resource: folder?.uri,
      platform: process.platform,
    });
  }

  private async launch(): Promise<void> {
    const interpreter = await this.resolveInterpreter();
    this.interpreter = interpreter;
    this.setStatus({ kind: 'starting', python: interpreter.command });
    this.output.appendLine(`Starting kernelcast with ${interpreter.command} (${interpreter.source}).`);

    const check = await checkKernelcast(interpreter.command);
    if (check.kind !== 'ok') {
      this.output.appendLine(check.detail);
      this.fail(describeLaunchProblem(check, interpreter), interpreter);
      return;
    }

    let started = false;
    const client: LanguageClient = new LanguageClient('kernelcast', 'kernelcast', this.serverOptions(interpreter), {
      ...this.clientOptions(),
      errorHandler: startupAwareErrorHandler(() => started, () => client.createDefaultErrorHandler()),
      initializationFailedHandler: () => false,
    });
    this.client = client;
    this.session.push(
      client.onNotification(STATUS_NOTIFICATION, (params: unknown) => this.setStatus({ kind: 'server-status', params })),
      client.onDidChangeState(({ newState }) => {
        if (newState === State.Running) {
          this.setStatus({ kind: 'running' });
        } else if (newState === State.Stopped) {
          this.setStatus({ kind: 'stopped' });
        }
      }),
    );
    // start() may resolve although the process died during `initialize` (the close handler
    // clears the client's start promise), so the state is what tells.
    await client.start().catch((error) => this.output.appendLine(`The server did not start: ${String(error)}`));
    if (client.state !== State.Running) {
      // The client has already shown "couldn't create connection" with "Go to output", where the server's stderr is.
      const { command, args } = serverLaunch(interpreter);
      await this.stop();
      this.setStatus({ kind: 'failed', message: `\`${command} ${args.join(' ')}\` exited during start-up` });
      return;
    }
    started = true;
    this.registerUndeclaredServerCommands(client);
    await this.restartWhenPythonExtensionSwitchesInterpreter(interpreter);
    void vscode.commands.executeCommand('setContext', RUNNING_CONTEXT, true);
  }

  private serverOptions(interpreter: Interpreter): ServerOptions {
    const { command, args } = serverLaunch(interpreter);
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
    // No `transport`: with TransportKind.stdio the client appends `--stdio`, which `kernelcast lsp` rejects.
    return { command, args, options: { cwd } };
  }

  private clientOptions(): LanguageClientOptions {
    const middleware: Middleware = {
      // Palette invocations carry no arguments; fill them from the cursor and an input box.
      executeCommand: async (command, args, next) => {
        const completed = await completeArguments(command, args, this.argumentSources);
        return completed && next(command, completed);
      },
      workspace: {
        // Answer pulls of our section with the same validated, nested object as initializationOptions.
        configuration: async (params, token, next) => {
          const answers = await next(params, token);
          if (!Array.isArray(answers)) {
            return answers;
          }
          return params.items.map((item, index) =>
            item.section === SECTION
              ? this.serverSettings(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined)
              : answers[index],
          );
        },
      },
    };
    return {
      documentSelector: [...DOCUMENT_SELECTOR],
      initializationOptions: this.serverSettings(),
      synchronize: { configurationSection: SECTION },
      outputChannel: this.output,
      middleware,
    };
  }

  private serverSettings(scope?: vscode.Uri): Record<string, unknown> {
    const configuration = vscode.workspace.getConfiguration(SECTION, scope);
    return buildServerSettings((key) => configuration.get(key));
  }

  /** The client registers the commands the server declares; the rest get a forwarding command here. */
  private registerUndeclaredServerCommands(client: LanguageClient): void {
    const declared = client.initializeResult?.capabilities.executeCommandProvider?.commands;
    for (const command of commandsToRegisterOnClient(declared)) {
      this.session.push(
        vscode.commands.registerCommand(command, async (...args: unknown[]) => {
          const completed = await completeArguments(command, args, this.argumentSources);
          return completed && client.sendRequest(ExecuteCommandRequest.type, { command, arguments: completed });
        }),
      );
    }
  }

  private async restartWhenPythonExtensionSwitchesInterpreter(current: Interpreter): Promise<void> {
    if (current.source !== 'python-extension') {
      return;
    }
    const environments = await pythonEnvironments();
    if (!environments) {
      return;
    }
    this.session.push(environments.onDidChangeActiveEnvironmentPath(() => this.restartIfInterpreterChanged()));
  }

  private async restartIfInterpreterChanged(): Promise<void> {
    const next = await this.resolveInterpreter();
    if (next.command !== this.interpreter?.command) {
      await this.restart();
    }
  }

  private async stop(): Promise<void> {
    void vscode.commands.executeCommand('setContext', RUNNING_CONTEXT, false);
    this.session.splice(0).forEach((disposable) => disposable.dispose());
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        // A client whose start failed has nothing to stop, and says so by throwing.
        if (client.needsStop()) {
          await client.dispose();
        }
      } catch (error) {
        this.output.appendLine(`Stopping the server failed: ${String(error)}`);
      }
      this.setStatus({ kind: 'stopped' });
    }
  }

  private fail(problem: LaunchProblem, interpreter: Interpreter): void {
    this.setStatus({ kind: 'failed', message: problem.message });
    void vscode.window.showErrorMessage(problem.message, ...problem.actions).then(async (action) => {
      if (action === 'Select interpreter') {
        await this.selectInterpreter(interpreter);
      } else if (action === 'Install kernelcast') {
        await this.installKernelcast(interpreter);
      } else if (action === 'Show output') {
        this.output.show(true);
      }
    });
  }

  private async selectInterpreter(current: Interpreter): Promise<void> {
    // The Python extension's picker only matters when kernelcast.python does not override it.
    if (current.source !== 'setting' && vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) {
      await vscode.commands.executeCommand('python.setInterpreter');
      // A cancelled picker changes nothing, and retrying would only repeat the error.
      await this.restartIfInterpreterChanged();
    } else {
      // Editing kernelcast.python restarts the server through the configuration listener.
      await vscode.commands.executeCommand('workbench.action.openSettings', `${SECTION}.python`);
    }
  }

  private async installKernelcast(interpreter: Interpreter): Promise<void> {
    // Until kernelcast is published, pip installs it from the user's clone of the repository.
    const picked = await vscode.window.showOpenDialog({
      canSelectFiles: false,
      canSelectFolders: true,
      canSelectMany: false,
      openLabel: 'Install kernelcast from this folder',
      title: 'kernelcast is not on PyPI yet: choose your clone of the kernelcast repository',
    });
    if (!picked?.length) {
      return;
    }
    const problem = checkoutProblem(picked[0].fsPath);
    if (problem) {
      void vscode.window.showErrorMessage(`kernelcast: ${problem}.`);
      return;
    }
    const terminal = vscode.window.createTerminal({ name: 'kernelcast: install' });
    terminal.show();
    terminal.sendText(pipInstallCommandLine(interpreter.command, picked[0].fsPath, process.platform));
    const choice = await vscode.window.showInformationMessage(
      'kernelcast: restart the server once pip has finished.',
      'Restart server',
    );
    if (choice) {
      await this.restart();
    }
  }

  private async measureKernelUnderCursor(): Promise<void> {
    if (!this.client?.isRunning()) {
      void vscode.window.showInformationMessage('kernelcast: the server is not running. Open a CUDA or Triton file first.');
      return;
    }
    // Without arguments the command's middleware (or fallback) points it at the cursor.
    await vscode.commands.executeCommand(MEASURE);
  }

  private async toggleInlayHints(): Promise<void> {
    const configuration = vscode.workspace.getConfiguration(SECTION);
    const toggle = toggleInlayHints(
      configuration.get<boolean>('inlayHints.enable', true),
      Boolean(vscode.workspace.workspaceFolders?.length),
    );
    const target = toggle.scope === 'workspace' ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
    await configuration.update(toggle.key, toggle.value, target);
    vscode.window.setStatusBarMessage(`kernelcast: inline hints ${toggle.value ? 'on' : 'off'}`, 3000);
  }

  private async pickStatusAction(): Promise<void> {
    const hintsOn = vscode.workspace.getConfiguration(SECTION).get<boolean>('inlayHints.enable', true);
    const actions: (vscode.QuickPickItem & { run: () => unknown })[] = [
      { label: 'Show output', run: () => this.output.show(true) },
      { label: 'Restart server', run: () => this.restart() },
      { label: `Turn inline hints ${hintsOn ? 'off' : 'on'} for this workspace`, run: () => this.toggleInlayHints() },
    ];
    const choice = await vscode.window.showQuickPick(actions, { title: 'kernelcast' });
    await choice?.run();
  }

  private setStatus(event: StatusEvent): void {
    this.status = nextStatus(this.status, event);
    const item = (this.statusItem ??= this.createStatusItem());
    const view = describeStatus(this.status);
    item.text = view.text;
    item.detail = view.detail;
    item.severity = SEVERITIES[view.severity];
    item.busy = view.busy;
  }

  private createStatusItem(): vscode.LanguageStatusItem {
    const item = vscode.languages.createLanguageStatusItem('kernelcast.status', [...DOCUMENT_SELECTOR]);
    item.name = 'kernelcast';
    item.command = { title: 'Actions…', command: STATUS_ACTIONS_COMMAND };
    this.context.subscriptions.push(item);
    return item;
  }
}

let extension: KernelcastExtension | undefined;

export function activate(context: vscode.ExtensionContext): void {
  extension = new KernelcastExtension(context);
  extension.activate();
}

export async function deactivate(): Promise<void> {
  await extension?.deactivate();
  extension = undefined;
}

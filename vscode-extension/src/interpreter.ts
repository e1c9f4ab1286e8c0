// Which Python runs the server, and whether kernelcast is importable there.
// The user's own interpreter matters: measuring needs their torch/triton/CUDA.

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export type InterpreterSource = 'setting' | 'python-extension' | 'default';

export interface Interpreter {
  command: string;
  source: InterpreterSource;
}

/** The slice of the Python extension's `exports.environments` API that we use. */
export interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: unknown): { id: string; path: string };
  resolveEnvironment(
    environment: { id: string; path: string } | string,
  ): Promise<{ executable: { uri?: { fsPath: string } } } | undefined>;
}

export interface InterpreterInputs {
  /** The `kernelcast.python` setting, possibly with ${workspaceFolder} or ~. */
  configuredPython: string;
  workspaceFolder?: string;
  /** The Python extension's environments API, or undefined when it is not installed. */
  pythonEnvironments?: () => Promise<PythonEnvironmentsApi | undefined>;
  /** Passed to the Python extension so multi-root workspaces get the folder's interpreter. */
  resource?: unknown;
  platform: NodeJS.Platform;
}

export async function resolveInterpreter(inputs: InterpreterInputs): Promise<Interpreter> {
  const configured = inputs.configuredPython.trim();
  if (configured) {
    return { command: expandPath(configured, inputs.workspaceFolder), source: 'setting' };
  }
  const fromExtension = await activeInterpreterOfPythonExtension(inputs);
  if (fromExtension) {
    return { command: fromExtension, source: 'python-extension' };
  }
  return { command: inputs.platform === 'win32' ? 'python' : 'python3', source: 'default' };
}

async function activeInterpreterOfPythonExtension(inputs: InterpreterInputs): Promise<string | undefined> {
  try {
    const api = await inputs.pythonEnvironments?.();
    if (!api) {
      return undefined;
    }
    const active = api.getActiveEnvironmentPath(inputs.resource);
    // `active.path` may be an environment folder; the resolved executable is the interpreter itself.
    const resolved = await api.resolveEnvironment(active);
    return resolved?.executable.uri?.fsPath ?? active.path ?? undefined;
  } catch {
    // A broken or still-loading Python extension must not keep kernelcast from starting.
    return undefined;
  }
}

export function expandPath(value: string, workspaceFolder: string | undefined): string {
  let expanded = value.replace(/^~(?=$|[\\/])/, os.homedir());
  if (workspaceFolder) {
    expanded = expanded.replace(/\$\{workspaceFolder\}/g, workspaceFolder);
  }
  return expanded;
}

/** How the server is launched: stdio transport, the interpreter's own kernelcast. */
export function serverLaunch(interpreter: Interpreter): { command: string; args: string[] } {
  return { command: interpreter.command, args: ['-m', 'kernelcast', 'lsp'] };
}

export type KernelcastCheck =
  | { kind: 'ok' }
  | { kind: 'interpreter-missing'; detail: string }
  | { kind: 'kernelcast-missing'; detail: string };

export interface ProcessResult {
  exitCode: number | null;
  stderr: string;
  /** Set when the process could not be started at all (e.g. ENOENT). */
  spawnError?: string;
}

export type ProcessRunner = (command: string, args: string[]) => Promise<ProcessResult>;

const CHECK_TIMEOUT_MS = 20_000;

export const runProcess: ProcessRunner = (command, args) =>
  new Promise((resolve) => {
    execFile(command, args, { timeout: CHECK_TIMEOUT_MS, windowsHide: true }, (error, _stdout, stderr) => {
      const code = (error as NodeJS.ErrnoException | null)?.code;
      if (typeof code === 'string') {
        resolve({ exitCode: null, stderr, spawnError: `${code}: ${error!.message}` });
      } else {
        resolve({ exitCode: error ? (typeof code === 'number' ? code : 1) : 0, stderr });
      }
    });
  });

/** Checked before launching, so a missing package gives a clear message instead of a crash loop. */
export async function checkKernelcast(python: string, run: ProcessRunner = runProcess): Promise<KernelcastCheck> {
  const result = await run(python, ['-c', 'import kernelcast']);
  if (result.spawnError) {
    return { kind: 'interpreter-missing', detail: result.spawnError };
  }
  if (result.exitCode !== 0) {
    return { kind: 'kernelcast-missing', detail: lastLine(result.stderr) };
  }
  return { kind: 'ok' };
}

function lastLine(text: string): string {
  const lines = text.trim().split(/\r?\n/);
  return lines[lines.length - 1] ?? '';
}

export type LaunchAction = 'Select interpreter' | 'Install kernelcast' | 'Show output';

export interface LaunchProblem {
  message: string;
  actions: LaunchAction[];
}

const SOURCE_WORDS: Record<InterpreterSource, string> = {
  setting: 'from the kernelcast.python setting',
  'python-extension': "the Python extension's active interpreter",
  default: 'the default',
};

export function describeLaunchProblem(
  check: Exclude<KernelcastCheck, { kind: 'ok' }>,
  interpreter: Interpreter,
): LaunchProblem {
  const which = `${interpreter.command} (${SOURCE_WORDS[interpreter.source]})`;
  if (check.kind === 'interpreter-missing') {
    return {
      message: `kernelcast: cannot run Python ${which}. Choose another interpreter.`,
      actions: ['Select interpreter', 'Show output'],
    };
  }
  return {
    message: `kernelcast is not installed in ${which}${check.detail ? `: ${check.detail}` : ''}.`,
    actions: ['Install kernelcast', 'Select interpreter'],
  };
}

/** The terminal line that installs kernelcast into exactly this interpreter, from a checkout
 * (kernelcast is not on PyPI yet): an editable install, so `git pull` updates it. */
export function pipInstallCommandLine(python: string, checkout: string, platform: NodeJS.Platform): string {
  const quote = (text: string) => (platform === 'win32' ? `"${text}"` : `'${text.replace(/'/g, `'\\''`)}'`);
  return `${platform === 'win32' ? '& ' : ''}${quote(python)} -m pip install -e ${quote(checkout)}`;
}

/** Why `folder` is not a kernelcast checkout (its pyproject.toml names the project), or undefined when it is. */
export function checkoutProblem(folder: string): string | undefined {
  let pyproject: string;
  try {
    pyproject = fs.readFileSync(path.join(folder, 'pyproject.toml'), 'utf8');
  } catch {
    return `${folder} has no pyproject.toml: choose the folder of your kernelcast clone`;
  }
  return /^name\s*=\s*["']kernelcast["']/m.test(pyproject) ? undefined : `${folder} is not a kernelcast checkout (its pyproject.toml names another project)`;
}

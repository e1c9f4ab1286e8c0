const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  checkKernelcast,
  checkoutProblem,
  describeLaunchProblem,
  expandPath,
  pipInstallCommandLine,
  resolveInterpreter,
  runProcess,
  serverLaunch,
} = require('../out/interpreter.js');

function pythonExtension(options = {}) {
  const { activePath = '/envs/ml', fail = false } = options;
  // An explicit `executable: undefined` means the extension cannot resolve the environment.
  const executable = 'executable' in options ? options.executable : '/envs/ml/bin/python';
  const calls = [];
  return {
    calls,
    api: async () => {
      if (fail) throw new Error('Python extension failed to activate');
      return {
        getActiveEnvironmentPath: (resource) => (calls.push(resource), { id: 'ml', path: activePath }),
        resolveEnvironment: async () => (executable ? { executable: { uri: { fsPath: executable } } } : undefined),
      };
    },
  };
}

const inputs = (overrides) => ({ configuredPython: '', platform: 'linux', ...overrides });

test('the kernelcast.python setting wins, with ${workspaceFolder} and ~ expanded', async () => {
  const extension = pythonExtension();
  const interpreter = await resolveInterpreter(
    inputs({ configuredPython: ' ${workspaceFolder}/.venv/bin/python ', workspaceFolder: '/repo', pythonEnvironments: extension.api }),
  );
  assert.deepEqual(interpreter, { command: '/repo/.venv/bin/python', source: 'setting' });
  assert.deepEqual(extension.calls, [], 'the Python extension is not even asked');
  assert.equal(expandPath('~/venv/bin/python', undefined), path.join(os.homedir(), 'venv/bin/python'));
  assert.equal(expandPath('/opt/~user/python', undefined), '/opt/~user/python');
});

test("then the Python extension's active interpreter, for the workspace's folder", async () => {
  const extension = pythonExtension();
  const interpreter = await resolveInterpreter(inputs({ pythonEnvironments: extension.api, resource: 'folder-uri' }));
  assert.deepEqual(interpreter, { command: '/envs/ml/bin/python', source: 'python-extension' });
  assert.deepEqual(extension.calls, ['folder-uri']);
});

test('an environment the Python extension cannot resolve falls back to its path', async () => {
  const extension = pythonExtension({ activePath: '/usr/bin/python3.12', executable: undefined });
  assert.deepEqual(await resolveInterpreter(inputs({ pythonEnvironments: extension.api })), {
    command: '/usr/bin/python3.12',
    source: 'python-extension',
  });
});

test('then python3 (python on Windows) when there is no usable Python extension', async () => {
  assert.deepEqual(await resolveInterpreter(inputs({})), { command: 'python3', source: 'default' });
  assert.deepEqual(await resolveInterpreter(inputs({ pythonEnvironments: async () => undefined })), { command: 'python3', source: 'default' });
  const broken = pythonExtension({ fail: true });
  assert.deepEqual(await resolveInterpreter(inputs({ pythonEnvironments: broken.api })), { command: 'python3', source: 'default' });
  assert.deepEqual(await resolveInterpreter(inputs({ platform: 'win32' })), { command: 'python', source: 'default' });
});

test('the server runs as `python -m kernelcast lsp`', () => {
  assert.deepEqual(serverLaunch({ command: '/v/bin/python', source: 'setting' }), { command: '/v/bin/python', args: ['-m', 'kernelcast', 'lsp'] });
});

test('the import check tells a missing interpreter from a missing package', async () => {
  const calls = [];
  const fake = (result) => async (command, args) => (calls.push([command, ...args]), result);
  assert.deepEqual(await checkKernelcast('py', fake({ exitCode: 0, stderr: '' })), { kind: 'ok' });
  assert.deepEqual(calls[0], ['py', '-c', 'import kernelcast']);
  assert.deepEqual(
    await checkKernelcast('py', fake({ exitCode: 1, stderr: "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'kernelcast'\n" })),
    { kind: 'kernelcast-missing', detail: "ModuleNotFoundError: No module named 'kernelcast'" },
  );
  assert.deepEqual(await checkKernelcast('py', fake({ exitCode: null, stderr: '', spawnError: 'ENOENT: spawn py ENOENT' })), {
    kind: 'interpreter-missing',
    detail: 'ENOENT: spawn py ENOENT',
  });
});

test('the real process runner reports exit codes and missing executables', { skip: process.platform === 'win32' }, async (t) => {
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'kernelcast-interpreter-'));
  t.after(() => fs.rmSync(folder, { recursive: true, force: true }));
  const fakePython = (name, body) => {
    const file = path.join(folder, name);
    fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    return file;
  };
  const withKernelcast = fakePython('good-python', 'exit 0');
  const withoutKernelcast = fakePython('bare-python', `echo "ModuleNotFoundError: No module named 'kernelcast'" >&2; exit 1`);
  assert.deepEqual(await checkKernelcast(withKernelcast), { kind: 'ok' });
  assert.deepEqual(await checkKernelcast(withoutKernelcast), { kind: 'kernelcast-missing', detail: "ModuleNotFoundError: No module named 'kernelcast'" });
  assert.equal((await checkKernelcast(path.join(folder, 'no-such-python'))).kind, 'interpreter-missing');
  assert.equal((await runProcess(withoutKernelcast, [])).exitCode, 1);
});

test('launch problems name the interpreter and offer the right actions', () => {
  const fromSetting = { command: '/venv/bin/python', source: 'setting' };
  const missingPackage = describeLaunchProblem({ kind: 'kernelcast-missing', detail: "No module named 'kernelcast'" }, fromSetting);
  assert.equal(missingPackage.message, "kernelcast is not installed in /venv/bin/python (from the kernelcast.python setting): No module named 'kernelcast'.");
  assert.deepEqual(missingPackage.actions, ['Install kernelcast', 'Select interpreter']);
  const missingPython = describeLaunchProblem({ kind: 'interpreter-missing', detail: 'ENOENT' }, { command: 'python3', source: 'default' });
  assert.match(missingPython.message, /cannot run Python python3 \(the default\)/);
  assert.deepEqual(missingPython.actions, ['Select interpreter', 'Show output']);
});

test('pip installs from the checkout into exactly that interpreter, quoted for the shell', () => {
  assert.equal(
    pipInstallCommandLine('/home/me/my envs/python', '/src/kernel cast', 'linux'),
    "'/home/me/my envs/python' -m pip install -e '/src/kernel cast'",
  );
  assert.equal(pipInstallCommandLine("/o'brien/python", '/src/kc', 'darwin'), `'/o'\\''brien/python' -m pip install -e '/src/kc'`);
  assert.equal(
    pipInstallCommandLine('C:\\Python312\\python.exe', 'C:\\src\\kernelcast', 'win32'),
    '& "C:\\Python312\\python.exe" -m pip install -e "C:\\src\\kernelcast"',
  );
});

test('only a folder whose pyproject.toml names kernelcast is taken for a checkout', (t) => {
  const repository = path.resolve(__dirname, '..', '..');
  assert.equal(checkoutProblem(repository), undefined);
  assert.match(checkoutProblem(__dirname), /has no pyproject.toml: choose the folder of your kernelcast clone/);
  const other = fs.mkdtempSync(path.join(os.tmpdir(), 'not-kernelcast-'));
  t.after(() => fs.rmSync(other, { recursive: true, force: true }));
  fs.writeFileSync(path.join(other, 'pyproject.toml'), '[project]\nname = "other"\n');
  assert.match(checkoutProblem(other), /is not a kernelcast checkout/);
});

// Runs the packaged extension, with the real vscode-languageclient, against the
// vscode stub and a fake `python -m kernelcast lsp` (test/stub/fakeServer.js).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { extractVsix } = require('./vsix.js');

const extension = extractVsix().loadExtension();
const vscode = require('vscode');
const { recorded, state, events, reset } = vscode.__stub;

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kernelcast-extension-'));
const serverLog = path.join(scratch, 'server.jsonl');
process.env.FAKE_SERVER_LOG = serverLog;

/** A shell script standing in for an interpreter; `importOk` decides `python -c "import kernelcast"`. */
function fakePython(name, { importOk }) {
  const file = path.join(scratch, name);
  const server = path.join(__dirname, 'stub', 'fakeServer.js');
  const importCheck = importOk ? 'exit 0' : `echo "ModuleNotFoundError: No module named 'kernelcast'" >&2; exit 1`;
  fs.writeFileSync(file, `#!/bin/sh\nif [ "$1" = "-c" ]; then ${importCheck}; fi\nexec "${process.execPath}" "${server}"\n`, { mode: 0o755 });
  return file;
}

const document = (languageId, text, file) => ({
  languageId,
  uri: vscode.Uri.file(file),
  getText: () => text,
  version: 1,
  isClosed: false,
});
const cudaFile = document('cuda-cpp', '__global__ void add(float *x) {}\n', '/work/add.cu');

async function until(condition, what) {
  for (let waited = 0; waited < 10_000; waited += 20) {
    const value = condition();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const serverMessages = () =>
  fs.existsSync(serverLog) ? fs.readFileSync(serverLog, 'utf8').trim().split('\n').filter(Boolean).map((line) => JSON.parse(line)) : [];
const statusText = () => recorded.statusItems[0]?.text;

test.beforeEach(() => {
  reset();
  fs.rmSync(serverLog, { force: true });
});
test.afterEach(() => extension.deactivate());

test('without kernel files nothing starts; an ordinary Python file changes nothing', async () => {
  extension.activate({ subscriptions: [] });
  events.openDocument.fire(document('python', 'import numpy\n', '/work/plain.py'));
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.deepEqual(recorded.statusItems, []);
  assert.deepEqual(serverMessages(), []);
  for (const command of ['kernelcast.measureKernelUnderCursor', 'kernelcast.restartServer', 'kernelcast.showLog', 'kernelcast.toggleInlayHints']) {
    assert.ok(recorded.commands.has(command), command);
  }
  await vscode.commands.executeCommand('kernelcast.measureKernelUnderCursor');
  assert.match(recorded.messages.at(-1).text, /server is not running/);
});

test('a missing interpreter shows an error with "Select interpreter"', async () => {
  state.settings.set('kernelcast.python', path.join(scratch, 'no-such-python'));
  vscode.workspace.textDocuments = [cudaFile];
  extension.activate({ subscriptions: [] });
  const message = await until(() => recorded.messages.find((entry) => entry.level === 'error'), 'the error');
  assert.match(message.text, /cannot run Python .*no-such-python \(from the kernelcast.python setting\)/);
  assert.deepEqual(message.actions, ['Select interpreter', 'Show output']);
  assert.equal(statusText(), 'kernelcast: not running');
  assert.equal(recorded.statusItems[0].severity, vscode.LanguageStatusSeverity.Error);
});

test('a Triton file in an interpreter without kernelcast offers to install it there', async () => {
  const python = fakePython('bare-python', { importOk: false });
  state.settings.set('kernelcast.python', python);
  state.answers.error = 'Install kernelcast';
  extension.activate({ subscriptions: [] });
  events.openDocument.fire(document('python', 'import triton\n', '/work/softmax.py'));
  const terminal = await until(() => recorded.terminals[0], 'the install terminal');
  assert.deepEqual(terminal.sent, [`'${python}' -m pip install kernelcast`]);
  assert.deepEqual(recorded.messages[0].actions, ['Install kernelcast', 'Select interpreter']);
  assert.deepEqual(serverMessages(), [], 'the server was never launched');
});

test('a running server gets the settings, drives the status item and receives commands', async () => {
  process.env.FAKE_SERVER_COMMANDS = 'kernelcast.measure,kernelcast.clearCache';
  state.settings.set('kernelcast.python', fakePython('python', { importOk: true }));
  state.settings.set('kernelcast.targetGpu', 'H200');
  state.settings.set('kernelcast.confidenceThreshold', 7);
  vscode.workspace.textDocuments = [cudaFile];
  extension.activate({ subscriptions: [] });

  await until(() => statusText() === 'kernelcast: forecasting 2', 'the kernelcast/status notification');
  assert.equal(recorded.contextKeys.get('kernelcast.serverRunning'), true);
  const initialize = serverMessages().find((message) => message.method === 'initialize');
  assert.deepEqual(initialize.params.initializationOptions.forecaster, { url: '', backend: 'embedded' });
  assert.equal(initialize.params.initializationOptions.targetGpu, 'H200');
  assert.equal(initialize.params.initializationOptions.confidenceThreshold, 1);
  const configurationAnswer = await until(() => serverMessages().find((message) => Array.isArray(message.result)), 'the configuration answer');
  assert.deepEqual(configurationAnswer.result[0], initialize.params.initializationOptions);

  // The inlay hint's label part: VS Code runs its command with the server's own arguments.
  const fromHint = { uri: 'file:///work/add.cu', position: { line: 0, character: 16 } };
  assert.deepEqual(await vscode.commands.executeCommand('kernelcast.measure', fromHint), {
    executed: { command: 'kernelcast.measure', arguments: [fromHint] },
  });

  vscode.window.activeTextEditor = { document: cudaFile, selection: { active: new vscode.Position(0, 5) } };
  await vscode.commands.executeCommand('kernelcast.measureKernelUnderCursor');
  state.answers.inputBox = 'kernels/baseline.cu';
  // setReference is not declared by this server, so the extension registered a forwarding command.
  await vscode.commands.executeCommand('kernelcast.setReference');
  await vscode.commands.executeCommand('kernelcast.clearCache');
  const executed = serverMessages()
    .filter((message) => message.method === 'workspace/executeCommand')
    .map((message) => message.params);
  const atCursor = { uri: cudaFile.uri.toString(), position: { line: 0, character: 5 } };
  assert.deepEqual(executed.slice(1), [
    { command: 'kernelcast.measure', arguments: [atCursor] },
    { command: 'kernelcast.setReference', arguments: [{ ...atCursor, reference: 'kernels/baseline.cu' }] },
    { command: 'kernelcast.clearCache', arguments: [] },
  ]);

  await extension.deactivate();
  assert.equal(statusText(), 'kernelcast: stopped');
  assert.equal(recorded.contextKeys.get('kernelcast.serverRunning'), false);
  assert.ok(!recorded.commands.has('kernelcast.measure') && !recorded.commands.has('kernelcast.setReference'));
  assert.ok(serverMessages().some((message) => message.method === 'exit'));
});

test('changing kernelcast.python restarts the server; other settings do not', async () => {
  process.env.FAKE_SERVER_COMMANDS = 'kernelcast.measure,kernelcast.setReference,kernelcast.clearCache';
  state.settings.set('kernelcast.python', fakePython('python', { importOk: true }));
  vscode.workspace.textDocuments = [cudaFile];
  extension.activate({ subscriptions: [] });
  await until(() => statusText() === 'kernelcast: forecasting 2', 'the first start');
  const starts = () => serverMessages().filter((message) => message.method === 'initialize').length;

  events.changeConfiguration.fire({ affectsConfiguration: (section) => section === 'kernelcast.inlayHints.enable' });
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(starts(), 1);

  state.settings.set('kernelcast.python', fakePython('other-python', { importOk: true }));
  events.changeConfiguration.fire({ affectsConfiguration: (section) => section === 'kernelcast.python' });
  await until(() => starts() === 2, 'the restart');
  await until(() => statusText() === 'kernelcast: forecasting 2', 'the restarted server');
});

test('the inline-hint toggle writes the workspace setting', async () => {
  vscode.workspace.workspaceFolders = [{ uri: vscode.Uri.file('/work'), name: 'work', index: 0 }];
  extension.activate({ subscriptions: [] });
  await vscode.commands.executeCommand('kernelcast.toggleInlayHints');
  await vscode.commands.executeCommand('kernelcast.toggleInlayHints');
  assert.deepEqual(recorded.configurationUpdates, [
    { key: 'kernelcast.inlayHints.enable', value: false, target: vscode.ConfigurationTarget.Workspace },
    { key: 'kernelcast.inlayHints.enable', value: true, target: vscode.ConfigurationTarget.Workspace },
  ]);
});

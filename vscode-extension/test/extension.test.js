// Runs the packaged extension, with the real vscode-languageclient, against the
// vscode stub and a fake `python -m kernelcast lsp` (test/stub/fakeServer.js).
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const path = require('node:path');
const {
  scratch,
  extension,
  vscode,
  recorded,
  state,
  events,
  fakePython,
  launchedCommandLines,
  document,
  cudaFile,
  until,
  serverMessages,
  statusText,
  resetAll,
} = require('./harness.js');

test.beforeEach(resetAll);
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
  const checkout = path.resolve(__dirname, '..', '..');
  state.answers.openDialog = [vscode.Uri.file(checkout)];
  extension.activate({ subscriptions: [] });
  events.openDocument.fire(document('python', 'import triton\n', '/work/softmax.py'));
  const terminal = await until(() => recorded.terminals[0], 'the install terminal');
  assert.deepEqual(terminal.sent, [`'${python}' -m pip install -e '${checkout}'`]);
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
  assert.deepEqual(launchedCommandLines(), ['-m kernelcast lsp']);
  assert.equal(recorded.contextKeys.get('kernelcast.serverRunning'), true);
  const initialize = serverMessages().find((message) => message.method === 'initialize');
  assert.deepEqual(initialize.params.initializationOptions.forecaster, { url: '', backend: 'embedded', timeoutMs: 10000 });
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
  await until(() => serverMessages().some((message) => message.method === 'exit'), 'the exit notification');
});

test('a server that exits during start-up is reported once and not restarted in a loop', () => {
  // In its own process: vscode-languageclient leaves rejections unhandled on this path,
  // which node's test runner would pin on whichever test is running.
  const report = JSON.parse(execFileSync(process.execPath, [path.join(__dirname, 'crashAtStartup.js')], { encoding: 'utf8' }));
  assert.deepEqual(report.launches, ['-m kernelcast lsp']);
  assert.equal(report.status.text, 'kernelcast: not running');
  assert.match(report.status.detail, /`.*crashing-python -m kernelcast lsp` exited during start-up/);
  // One notification: the client's own, whose "Go to output" shows the server's stderr.
  assert.deepEqual(report.errors, [{ level: 'error', text: "kernelcast client: couldn't create connection to server.", actions: ['Go to output'] }]);
  assert.deepEqual(report.unexpectedRejections, []);
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

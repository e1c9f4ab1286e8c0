// Shared by extension.test.js and crashAtStartup.js: the packaged extension loaded against
// the vscode stub, fake interpreters, and what the fake server received.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { extractVsix } = require('./vsix.js');

const extension = extractVsix().loadExtension();
const vscode = require('vscode');
const { recorded, state, events, reset } = vscode.__stub;

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kernelcast-extension-'));
process.on('exit', () => fs.rmSync(scratch, { recursive: true, force: true }));
const serverLog = path.join(scratch, 'server.jsonl');
process.env.FAKE_SERVER_LOG = serverLog;

const launches = path.join(scratch, 'launches.log');

/**
 * A shell script standing in for an interpreter. `importOk` decides `python -c "import kernelcast"`;
 * like the real CLI it refuses any command line but `-m kernelcast lsp`; `crashes` makes that exit at once.
 */
function fakePython(name, { importOk, crashes = false }) {
  const file = path.join(scratch, name);
  const server = path.join(__dirname, 'stub', 'fakeServer.js');
  const importCheck = importOk ? 'exit 0' : `echo "ModuleNotFoundError: No module named 'kernelcast'" >&2; exit 1`;
  const serve = crashes ? 'echo "kernelcast: error: no GPU driver" >&2; exit 2' : `exec "${process.execPath}" "${server}"`;
  const script = [
    '#!/bin/sh',
    `if [ "$1" = "-c" ]; then ${importCheck}; fi`,
    `echo "$*" >> "${launches}"`,
    'if [ "$*" != "-m kernelcast lsp" ]; then echo "kernelcast: error: unrecognized arguments: $*" >&2; exit 2; fi',
    serve,
  ];
  fs.writeFileSync(file, `${script.join('\n')}\n`, { mode: 0o755 });
  return file;
}
const launchedCommandLines = () => (fs.existsSync(launches) ? fs.readFileSync(launches, 'utf8').trim().split('\n') : []);

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

/** A fresh window and fresh logs for the next scenario. */
function resetAll() {
  reset();
  fs.rmSync(serverLog, { force: true });
  fs.rmSync(launches, { force: true });
}

module.exports = {
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
};

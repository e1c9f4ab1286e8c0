// Child process for extension.test.js: a server that dies during `initialize`.
// Prints what the user would see as JSON.
const { extension, vscode, recorded, state, fakePython, launchedCommandLines, cudaFile, until, statusText } = require('./harness.js');

// vscode-languageclient 9.0.1 itself leaves these unhandled on this path, depending on timing:
// `void this.stop()` while starting; writing `initialize` into the pipe of the exited process
// (EPIPE or destroyed stream); its start promise, orphaned when the close handler clears it.
// VS Code only logs them. Anything else is reported.
const knownLibraryRejections = [
  /^Client is not running and can't be stopped/,
  /^Cannot call write after a stream was destroyed/,
  /^write EPIPE/,
  /^Pending response rejected since connection got disposed/,
];
const unexpectedRejections = [];
process.on('unhandledRejection', (error) => {
  if (!knownLibraryRejections.some((known) => known.test(error?.message))) unexpectedRejections.push(String(error));
});

(async () => {
  state.settings.set('kernelcast.python', fakePython('crashing-python', { importOk: true, crashes: true }));
  vscode.workspace.textDocuments = [cudaFile];
  extension.activate({ subscriptions: [] });
  await until(() => statusText() === 'kernelcast: not running', 'the failure');
  // Long enough for a restart loop to show itself, were there one.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const [item] = recorded.statusItems;
  await extension.deactivate();
  const report = {
    launches: launchedCommandLines(),
    status: { text: item.text, detail: item.detail },
    errors: recorded.messages.filter((entry) => entry.level === 'error'),
    unexpectedRejections,
  };
  // Exit at once: the failed client leaves timers behind that would hold the process for seconds.
  process.stdout.write(JSON.stringify(report), () => process.exit(0));
})();

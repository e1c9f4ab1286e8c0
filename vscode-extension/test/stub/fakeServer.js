// Stands in for `python -m kernelcast lsp`: speaks just enough LSP over stdio and
// appends every message it receives to $FAKE_SERVER_LOG as one JSON line.
const fs = require('node:fs');

const log = process.env.FAKE_SERVER_LOG;
const declaredCommands = (process.env.FAKE_SERVER_COMMANDS ?? '').split(',').filter(Boolean);
let nextRequestId = 1;

function send(message) {
  const body = JSON.stringify({ jsonrpc: '2.0', ...message });
  process.stdout.write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
}

function handle(message) {
  fs.appendFileSync(log, `${JSON.stringify(message)}\n`);
  switch (message.method) {
    case 'initialize':
      send({ id: message.id, result: { capabilities: { textDocumentSync: 1, executeCommandProvider: { commands: declaredCommands } } } });
      break;
    case 'initialized':
      send({ method: 'kernelcast/status', params: { state: 'forecasting', pending: 2 } });
      send({ id: nextRequestId++, method: 'workspace/configuration', params: { items: [{ section: 'kernelcast' }] } });
      break;
    case 'workspace/executeCommand':
      send({ id: message.id, result: { executed: message.params } });
      break;
    case 'shutdown':
      send({ id: message.id, result: null });
      break;
    case 'exit':
      process.exit(0);
  }
}

let buffered = Buffer.alloc(0);
process.stdin.on('data', (chunk) => {
  buffered = Buffer.concat([buffered, chunk]);
  for (;;) {
    const headerEnd = buffered.indexOf('\r\n\r\n');
    if (headerEnd < 0) return;
    const length = Number(/Content-Length: (\d+)/i.exec(buffered.toString('ascii', 0, headerEnd))[1]);
    const bodyStart = headerEnd + 4;
    if (buffered.length < bodyStart + length) return;
    handle(JSON.parse(buffered.toString('utf8', bodyStart, bodyStart + length)));
    buffered = buffered.subarray(bodyStart + length);
  }
});

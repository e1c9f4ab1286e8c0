const test = require('node:test');
const assert = require('node:assert/strict');
const { commandsToRegisterOnClient, completeArguments, SERVER_COMMANDS } = require('../out/serverCommands.js');

const cursorAt = { uri: 'file:///work/add.cu', position: { line: 4, character: 2 } };

function sources(options = {}) {
  const asked = [];
  const { reference } = options;
  return {
    asked,
    // An explicit `cursor: undefined` means no active editor.
    cursor: () => ('cursor' in options ? options.cursor : cursorAt),
    askReference: async () => {
      asked.push('reference');
      return reference;
    },
  };
}

test('the client registers only the server commands the server does not declare', () => {
  assert.deepEqual(commandsToRegisterOnClient(SERVER_COMMANDS), []);
  assert.deepEqual(commandsToRegisterOnClient(['kernelcast.measure']), ['kernelcast.setReference', 'kernelcast.clearCache']);
  assert.deepEqual(commandsToRegisterOnClient(undefined), [...SERVER_COMMANDS]);
});

test('measure from a hint keeps its arguments; from the palette it uses the cursor', async () => {
  const fromHint = [{ uri: 'file:///work/other.cu', position: { line: 9, character: 0 } }];
  assert.equal(await completeArguments('kernelcast.measure', fromHint, sources()), fromHint);
  assert.deepEqual(await completeArguments('kernelcast.measure', [], sources()), [cursorAt]);
  assert.equal(await completeArguments('kernelcast.measure', [], sources({ cursor: undefined })), undefined);
});

test('setReference asks for a path and sends it with the kernel location', async () => {
  const input = sources({ reference: '  kernels/baseline.cu ' });
  assert.deepEqual(await completeArguments('kernelcast.setReference', [], input), [{ ...cursorAt, reference: 'kernels/baseline.cu' }]);
  const fromAction = { uri: 'file:///work/b.cu', position: { line: 1, character: 1 } };
  assert.deepEqual(await completeArguments('kernelcast.setReference', [fromAction], sources({ reference: 'a.cu' })), [
    { ...fromAction, reference: 'a.cu' },
  ]);
  const complete = [{ ...cursorAt, reference: 'given.cu' }];
  const untouched = sources();
  assert.equal(await completeArguments('kernelcast.setReference', complete, untouched), complete);
  assert.deepEqual(untouched.asked, []);
});

test('setReference is dropped when the user cancels or enters nothing', async () => {
  assert.equal(await completeArguments('kernelcast.setReference', [], sources({ reference: undefined })), undefined);
  assert.equal(await completeArguments('kernelcast.setReference', [], sources({ reference: '   ' })), undefined);
  const noEditor = sources({ cursor: undefined, reference: 'x.cu' });
  assert.equal(await completeArguments('kernelcast.setReference', [], noEditor), undefined);
  assert.deepEqual(noEditor.asked, [], 'no prompt without a kernel to attach it to');
});

test('clearCache and unknown commands pass through unchanged', async () => {
  assert.deepEqual(await completeArguments('kernelcast.clearCache', [], sources()), []);
  assert.deepEqual(await completeArguments('other.command', [1, 2], sources()), [1, 2]);
});

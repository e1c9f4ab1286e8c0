// Checks the packaged .vsix (built by `npm run package` in pretest): its manifest,
// its contents, and that the bundled extension loads against the vscode stub.
const test = require('node:test');
const assert = require('node:assert/strict');
const { extractVsix } = require('./vsix.js');

const { files, manifest, loadExtension } = extractVsix();

test('the .vsix holds the bundle, manifest, readme and license, and no sources or node_modules', () => {
  const names = [...files.keys()].sort();
  assert.deepEqual(names, [
    '[Content_Types].xml',
    'extension.vsixmanifest',
    'extension/LICENSE.txt',
    'extension/dist/extension.js',
    'extension/package.json',
    'extension/readme.md',
  ]);
  assert.match(files.get('extension/LICENSE.txt').toString(), /MIT License[\s\S]*kernelcast authors/);
});

test('the manifest names, versions and points at the bundle', () => {
  assert.equal(manifest.name, 'kernelcast');
  assert.equal(manifest.displayName, 'kernelcast');
  assert.equal(manifest.publisher, 'kernelcast');
  assert.equal(manifest.version, '0.1.0');
  assert.equal(manifest.license, 'MIT');
  assert.ok(manifest.repository?.url);
  assert.equal(manifest.engines.vscode, '^1.85.0');
  assert.equal(manifest.main, './dist/extension.js');
  assert.deepEqual(manifest.activationEvents, ['onLanguage:cuda-cpp', 'onLanguage:cuda', 'onLanguage:python']);
  assert.equal(manifest.dependencies['vscode-languageclient'], '9.0.1');
});

test('the manifest contributes every setting the server and client read', () => {
  assert.deepEqual(Object.keys(manifest.contributes.configuration.properties).sort(), [
    'kernelcast.allowReferencesOutsideWorkspace',
    'kernelcast.cacheDir',
    'kernelcast.codeActions.enable',
    'kernelcast.compilerFacts.enable',
    'kernelcast.confidenceThreshold',
    'kernelcast.debounceMs',
    'kernelcast.diagnostics.enable',
    'kernelcast.enable',
    'kernelcast.exclude',
    'kernelcast.forecaster.backend',
    'kernelcast.forecaster.timeoutMs',
    'kernelcast.forecaster.url',
    'kernelcast.hover.enable',
    'kernelcast.inlayHints.enable',
    'kernelcast.measure.kernelTimeoutMs',
    'kernelcast.measure.tolerance',
    'kernelcast.python',
    'kernelcast.targetGpu',
    'kernelcast.trace.server',
  ]);
});

test('the manifest contributes the palette commands', () => {
  const commands = manifest.contributes.commands.map((command) => command.command);
  for (const command of [
    'kernelcast.measureKernelUnderCursor',
    'kernelcast.setReference',
    'kernelcast.restartServer',
    'kernelcast.showLog',
    'kernelcast.clearCache',
  ]) {
    assert.ok(commands.includes(command), command);
  }
  assert.ok(manifest.contributes.commands.every((command) => command.title && command.category === 'kernelcast'));
});

test('the bundled extension.js loads in node with the stub and exports activate/deactivate', () => {
  const extension = loadExtension();
  assert.equal(typeof extension.activate, 'function');
  assert.equal(typeof extension.deactivate, 'function');
});

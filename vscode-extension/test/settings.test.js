const test = require('node:test');
const assert = require('node:assert/strict');
const {
  buildServerSettings,
  CLIENT_SETTING_DEFAULTS,
  needsRestart,
  SERVER_SETTING_DEFAULTS,
  toggleInlayHints,
} = require('../out/settings.js');
const manifest = require('../package.json');

const reader = (values) => (key) => values[key];

test('defaults become the nested object the server reads', () => {
  assert.deepEqual(buildServerSettings(reader({})), {
    enable: true,
    inlayHints: { enable: true },
    diagnostics: { enable: true },
    hover: { enable: true },
    codeActions: { enable: true },
    compilerFacts: { enable: true },
    confidenceThreshold: 0.8,
    exclude: [],
    forecaster: { url: '', backend: 'embedded', timeoutMs: 10000 },
    targetGpu: '',
    debounceMs: 400,
    measure: { kernelTimeoutMs: 10000, tolerance: 'auto' },
    allowReferencesOutsideWorkspace: false,
    cacheDir: '',
  });
});

test('the measure tolerance takes a word or a number, and nothing else', () => {
  assert.equal(buildServerSettings(reader({ 'measure.tolerance': 'strict' })).measure.tolerance, 'strict');
  assert.equal(buildServerSettings(reader({ 'measure.tolerance': 0.001 })).measure.tolerance, 0.001);
  assert.equal(buildServerSettings(reader({ 'measure.tolerance': [1] })).measure.tolerance, 'auto');
  assert.equal(buildServerSettings(reader({ 'measure.tolerance': Number.NaN })).measure.tolerance, 'auto');
});

test('user values pass through under their nested keys', () => {
  const settings = buildServerSettings(
    reader({ 'inlayHints.enable': false, 'forecaster.url': 'http://gpu-box:8000', targetGpu: 'B200', exclude: ['**/vendor/**'] }),
  );
  assert.equal(settings.inlayHints.enable, false);
  assert.deepEqual(settings.forecaster, { url: 'http://gpu-box:8000', backend: 'embedded', timeoutMs: 10000 });
  assert.equal(settings.targetGpu, 'B200');
  assert.deepEqual(settings.exclude, ['**/vendor/**']);
});

test('values of the wrong type fall back to the default', () => {
  const settings = buildServerSettings(reader({ enable: 'yes', debounceMs: 'fast', exclude: 'vendor', confidenceThreshold: NaN }));
  assert.equal(settings.enable, true);
  assert.equal(settings.debounceMs, 400);
  assert.deepEqual(settings.exclude, []);
  assert.equal(settings.confidenceThreshold, 0.8);
});

test('numbers are kept in their documented range', () => {
  assert.equal(buildServerSettings(reader({ confidenceThreshold: 0.1 })).confidenceThreshold, 0.5);
  assert.equal(buildServerSettings(reader({ confidenceThreshold: 3 })).confidenceThreshold, 1);
  assert.equal(buildServerSettings(reader({ debounceMs: -5 })).debounceMs, 0);
  assert.equal(buildServerSettings(reader({ debounceMs: 250.6 })).debounceMs, 251);
  assert.equal(buildServerSettings(reader({ 'forecaster.timeoutMs': 120000.4 })).forecaster.timeoutMs, 120000);
  assert.equal(buildServerSettings(reader({ 'forecaster.timeoutMs': 10 })).forecaster.timeoutMs, 1000);
  assert.equal(buildServerSettings(reader({ 'measure.kernelTimeoutMs': 1e9 })).measure.kernelTimeoutMs, 600000);
  assert.deepEqual(buildServerSettings(reader({ exclude: ['a/**', 3] })).exclude, ['a/**']);
});

test('only interpreter, cache folder and forecaster URL changes restart the server', () => {
  const affecting = (...changed) => (section) => changed.some((key) => key === section || key.startsWith(`${section}.`));
  assert.equal(needsRestart(affecting('kernelcast.python')), true);
  assert.equal(needsRestart(affecting('kernelcast.cacheDir')), true);
  assert.equal(needsRestart(affecting('kernelcast.forecaster.url')), true);
  assert.equal(needsRestart(affecting('kernelcast.forecaster.backend')), false);
  assert.equal(needsRestart(affecting('kernelcast.inlayHints.enable')), false);
  assert.equal(needsRestart(affecting('editor.fontSize')), false);
});

test('the inline-hint toggle flips the value at workspace scope, user scope without a folder', () => {
  assert.deepEqual(toggleInlayHints(true, true), { key: 'inlayHints.enable', value: false, scope: 'workspace' });
  assert.deepEqual(toggleInlayHints(false, false), { key: 'inlayHints.enable', value: true, scope: 'global' });
});

test('package.json contributes exactly the settings the code knows, with the same defaults', () => {
  const contributed = manifest.contributes.configuration.properties;
  const known = { ...SERVER_SETTING_DEFAULTS, ...CLIENT_SETTING_DEFAULTS };
  assert.deepEqual(Object.keys(contributed).sort(), Object.keys(known).map((key) => `kernelcast.${key}`).sort());
  for (const [key, fallback] of Object.entries(known)) {
    const property = contributed[`kernelcast.${key}`];
    assert.deepEqual(property.default, fallback, key);
    assert.ok(property.description, `${key} is documented`);
    const expectedType = Array.isArray(fallback) ? 'array' : Number.isInteger(fallback) && key !== 'confidenceThreshold' ? 'integer' : typeof fallback;
    assert.deepEqual(property.type, key === 'measure.tolerance' ? ['string', 'number'] : expectedType, key);
  }
  assert.deepEqual(contributed['kernelcast.targetGpu'].enum, ['', 'H100-SXM', 'H100-PCIe', 'H200', 'A100', 'L40S', 'RTX4090', 'B200', 'L4', 'T4', 'V100']);
  assert.deepEqual(contributed['kernelcast.trace.server'].enum, ['off', 'messages', 'verbose']);
  assert.equal(contributed['kernelcast.confidenceThreshold'].minimum, 0.5);
  assert.equal(contributed['kernelcast.confidenceThreshold'].maximum, 1);
});

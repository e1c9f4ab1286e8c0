const test = require('node:test');
const assert = require('node:assert/strict');
const { describeStatus, INITIAL_STATUS, nextStatus, parseServerStatus } = require('../out/status.js');

const run = (...events) => events.reduce(nextStatus, INITIAL_STATUS);
const serverStatus = (params) => ({ kind: 'server-status', params });

test('starting, then idle once the client runs', () => {
  const starting = run({ kind: 'starting', python: '/venv/bin/python' });
  assert.deepEqual(describeStatus(starting), { text: 'kernelcast: starting', detail: 'with /venv/bin/python', severity: 'information', busy: true });
  assert.equal(describeStatus(nextStatus(starting, { kind: 'running' })).text, 'kernelcast: idle');
});

test('server notifications drive idle / forecasting N / measuring / error', () => {
  const running = run({ kind: 'starting', python: 'python3' }, { kind: 'running' });
  const forecasting = describeStatus(nextStatus(running, serverStatus({ state: 'forecasting', pending: 3 })));
  assert.equal(forecasting.text, 'kernelcast: forecasting 3');
  assert.equal(forecasting.busy, true);
  const measuring = describeStatus(nextStatus(running, serverStatus({ state: 'measuring', pending: 0, message: 'matmul on H100' })));
  assert.deepEqual(measuring, { text: 'kernelcast: measuring', detail: 'matmul on H100', severity: 'information', busy: true });
  const error = describeStatus(nextStatus(running, serverStatus({ state: 'error', pending: 0, message: 'forecaster unreachable' })));
  assert.deepEqual(error, { text: 'kernelcast: error', detail: 'forecaster unreachable', severity: 'error', busy: false });
  const idle = describeStatus(nextStatus(running, serverStatus({ state: 'idle', pending: 0 })));
  assert.equal(idle.text, 'kernelcast: idle');
  assert.equal(idle.busy, false);
});

test('a status that arrives before the client reports running is kept', () => {
  const model = run({ kind: 'starting', python: 'python3' }, serverStatus({ state: 'forecasting', pending: 1 }), { kind: 'running' });
  assert.equal(describeStatus(model).text, 'kernelcast: forecasting 1');
});

test('malformed notifications are ignored', () => {
  const running = run({ kind: 'running' });
  for (const params of [null, 'idle', { state: 'sleeping', pending: 1 }, {}]) {
    assert.equal(nextStatus(running, serverStatus(params)), running);
  }
  assert.deepEqual(parseServerStatus({ state: 'forecasting', pending: -2, message: 7 }), { state: 'forecasting', pending: 0 });
  assert.deepEqual(parseServerStatus({ state: 'forecasting', pending: 2.7 }), { state: 'forecasting', pending: 2 });
});

test('forecasting without a count says so without a zero', () => {
  assert.equal(describeStatus(run(serverStatus({ state: 'forecasting', pending: 0 }))).text, 'kernelcast: forecasting');
});

test('a failure stays visible: late notifications and the stop that follows do not hide it', () => {
  const failed = run({ kind: 'starting', python: 'python3' }, { kind: 'failed', message: 'kernelcast is not installed' });
  assert.equal(nextStatus(failed, serverStatus({ state: 'idle', pending: 0 })), failed);
  assert.equal(nextStatus(failed, { kind: 'stopped' }), failed);
  assert.deepEqual(describeStatus(failed), { text: 'kernelcast: not running', detail: 'kernelcast is not installed', severity: 'error', busy: false });
  assert.equal(describeStatus(nextStatus(failed, { kind: 'starting', python: 'python3' })).text, 'kernelcast: starting');
});

test('stopped is a warning and ignores notifications from the dying server', () => {
  const stopped = run({ kind: 'running' }, { kind: 'stopped' });
  assert.equal(describeStatus(stopped).severity, 'warning');
  assert.equal(nextStatus(stopped, serverStatus({ state: 'forecasting', pending: 1 })), stopped);
});

// What the language status item says: the client's lifecycle combined with the
// server's `kernelcast/status` notifications. Pure, so transitions are testable.

export const STATUS_NOTIFICATION = 'kernelcast/status';

export type ServerState = 'idle' | 'forecasting' | 'measuring' | 'error';
const SERVER_STATES: readonly ServerState[] = ['idle', 'forecasting', 'measuring', 'error'];

export interface ServerStatus {
  state: ServerState;
  pending: number;
  message?: string;
}

export type StatusModel =
  | { phase: 'not-started' }
  | { phase: 'starting'; python: string }
  | { phase: 'running'; server: ServerStatus }
  | { phase: 'stopped' }
  | { phase: 'failed'; message: string };

export type StatusEvent =
  | { kind: 'starting'; python: string }
  | { kind: 'running' }
  | { kind: 'server-status'; params: unknown }
  | { kind: 'stopped' }
  | { kind: 'failed'; message: string };

export const INITIAL_STATUS: StatusModel = { phase: 'not-started' };

const IDLE: ServerStatus = { state: 'idle', pending: 0 };

/** Validates a notification's params; a malformed one is ignored rather than shown. */
export function parseServerStatus(params: unknown): ServerStatus | undefined {
  if (typeof params !== 'object' || params === null) {
    return undefined;
  }
  const { state, pending, message } = params as Record<string, unknown>;
  if (!SERVER_STATES.includes(state as ServerState)) {
    return undefined;
  }
  return {
    state: state as ServerState,
    pending: typeof pending === 'number' && pending > 0 ? Math.floor(pending) : 0,
    ...(typeof message === 'string' && message ? { message } : {}),
  };
}

export function nextStatus(current: StatusModel, event: StatusEvent): StatusModel {
  switch (event.kind) {
    case 'starting':
      return { phase: 'starting', python: event.python };
    case 'running':
      // Keep a status the server already sent while the client was still starting.
      return current.phase === 'running' ? current : { phase: 'running', server: IDLE };
    case 'server-status': {
      const server = parseServerStatus(event.params);
      // A late notification from a server being stopped must not revive the item.
      if (!server || current.phase === 'stopped' || current.phase === 'failed') {
        return current;
      }
      return { phase: 'running', server };
    }
    case 'stopped':
      return current.phase === 'failed' ? current : { phase: 'stopped' };
    case 'failed':
      return { phase: 'failed', message: event.message };
  }
}

export type StatusSeverity = 'information' | 'warning' | 'error';

export interface StatusView {
  text: string;
  detail: string;
  severity: StatusSeverity;
  busy: boolean;
}

export function describeStatus(model: StatusModel): StatusView {
  switch (model.phase) {
    case 'not-started':
      return { text: 'kernelcast', detail: 'not started', severity: 'information', busy: false };
    case 'starting':
      return { text: 'kernelcast: starting', detail: `with ${model.python}`, severity: 'information', busy: true };
    case 'stopped':
      return { text: 'kernelcast: stopped', detail: 'the server is not running', severity: 'warning', busy: false };
    case 'failed':
      return { text: 'kernelcast: not running', detail: model.message, severity: 'error', busy: false };
    case 'running':
      return describeServer(model.server);
  }
}

function describeServer(server: ServerStatus): StatusView {
  switch (server.state) {
    case 'idle':
      return { text: 'kernelcast: idle', detail: server.message ?? 'forecasts are up to date', severity: 'information', busy: false };
    case 'forecasting':
      return {
        text: server.pending > 0 ? `kernelcast: forecasting ${server.pending}` : 'kernelcast: forecasting',
        detail: server.message ?? 'kernels waiting for a forecast',
        severity: 'information',
        busy: true,
      };
    case 'measuring':
      return { text: 'kernelcast: measuring', detail: server.message ?? 'running on the GPU', severity: 'information', busy: true };
    case 'error':
      return { text: 'kernelcast: error', detail: server.message ?? 'see the output for details', severity: 'error', busy: false };
  }
}

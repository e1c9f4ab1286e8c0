// The settings the kernelcast server reads, and how the client maps VS Code's
// configuration onto them. Pure: no `vscode` import, so node tests can load it.

export type SettingValue = boolean | number | string | string[];

/** Every key the server reads under the `kernelcast` section, with its default. */
export const SERVER_SETTING_DEFAULTS: Readonly<Record<string, SettingValue>> = {
  enable: true,
  'inlayHints.enable': true,
  'diagnostics.enable': true,
  'hover.enable': true,
  'codeActions.enable': true,
  'compilerFacts.enable': true,
  confidenceThreshold: 0.8,
  exclude: [],
  'forecaster.url': '',
  'forecaster.backend': 'embedded',
  'forecaster.timeoutMs': 10000,
  targetGpu: '',
  debounceMs: 400,
  'measure.kernelTimeoutMs': 10000,
  'measure.tolerance': 'auto',
  allowReferencesOutsideWorkspace: false,
  cacheDir: '',
};

/** Keys only the extension reads. `trace.server` is read by vscode-languageclient itself. */
export const CLIENT_SETTING_DEFAULTS: Readonly<Record<string, SettingValue>> = {
  python: '',
  'trace.server': 'off',
};

export const SECTION = 'kernelcast';

/** Changing these means a different process or service, so the server must restart. */
export const RESTART_KEYS: readonly string[] = ['python', 'cacheDir', 'forecaster.url'];

export const CONFIDENCE_RANGE = { min: 0.5, max: 1 } as const;

/** Settings in whole milliseconds, with the range the server accepts (kernelcast/settings.py). */
export const MILLISECOND_RANGES: Readonly<Record<string, { min: number; max: number }>> = {
  debounceMs: { min: 0, max: 60000 },
  'forecaster.timeoutMs': { min: 1000, max: 600000 },
  'measure.kernelTimeoutMs': { min: 100, max: 600000 },
};

/** Reads one key relative to the `kernelcast` section; undefined when unset. */
export type SettingReader = (key: string) => unknown;

/**
 * The nested object the server expects (dotted keys become nested objects, as
 * VS Code nests them). Values of the wrong type fall back to the default:
 * VS Code does not enforce the schema on hand-edited settings.json files.
 */
export function buildServerSettings(read: SettingReader): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  for (const [key, fallback] of Object.entries(SERVER_SETTING_DEFAULTS)) {
    setNested(settings, key, sanitize(key, read(key), fallback));
  }
  return settings;
}

/** Settings that take either a word or a number (the server names the words it accepts). */
const WORD_OR_NUMBER_KEYS: readonly string[] = ['measure.tolerance'];

function sanitize(key: string, value: unknown, fallback: SettingValue): SettingValue {
  if (WORD_OR_NUMBER_KEYS.includes(key)) {
    return typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value)) ? value : fallback;
  }
  if (Array.isArray(fallback)) {
    return Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : fallback;
  }
  if (typeof value !== typeof fallback || (typeof value === 'number' && !Number.isFinite(value))) {
    return fallback;
  }
  if (key === 'confidenceThreshold') {
    return Math.min(CONFIDENCE_RANGE.max, Math.max(CONFIDENCE_RANGE.min, value as number));
  }
  const milliseconds = MILLISECOND_RANGES[key];
  if (milliseconds) {
    return Math.min(milliseconds.max, Math.max(milliseconds.min, Math.round(value as number)));
  }
  return value as SettingValue;
}

function setNested(target: Record<string, unknown>, dottedKey: string, value: unknown): void {
  const parts = dottedKey.split('.');
  let node = target;
  for (const part of parts.slice(0, -1)) {
    node = (node[part] ??= {}) as Record<string, unknown>;
  }
  node[parts[parts.length - 1]] = value;
}

/** `affects` is ConfigurationChangeEvent.affectsConfiguration. */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_KEYS.some((key) => affects(`${SECTION}.${key}`));
}

export type InlayHintsToggle = { key: 'inlayHints.enable'; value: boolean; scope: 'workspace' | 'global' };

/** The workspace scope keeps the toggle local; with no folder open only the user scope exists. */
export function toggleInlayHints(currentlyEnabled: boolean, hasWorkspace: boolean): InlayHintsToggle {
  return { key: 'inlayHints.enable', value: !currentlyEnabled, scope: hasWorkspace ? 'workspace' : 'global' };
}

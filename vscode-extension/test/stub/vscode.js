// A small fake of the `vscode` module. It implements what kernelcast calls and
// records it; anything else vscode-languageclient touches becomes a harmless no-op,
// so the real client can run against a fake server in node.

class Disposable {
  constructor(onDispose = () => {}) {
    this.onDispose = onDispose;
  }
  static from(...disposables) {
    return new Disposable(() => disposables.forEach((disposable) => disposable?.dispose?.()));
  }
  dispose() {
    this.onDispose();
    this.onDispose = () => {};
  }
}

class EventEmitter {
  constructor() {
    this.listeners = new Set();
    this.event = (listener, thisArg) => {
      const bound = listener.bind(thisArg);
      this.listeners.add(bound);
      return new Disposable(() => this.listeners.delete(bound));
    };
  }
  fire(value) {
    [...this.listeners].forEach((listener) => listener(value));
  }
  dispose() {
    this.listeners.clear();
  }
}

class Uri {
  constructor(scheme, path) {
    this.scheme = scheme;
    this.path = path;
    this.fsPath = path;
  }
  static file(path) {
    return new Uri('file', path);
  }
  static parse(text) {
    const match = /^([a-z][\w+.-]*):(?:\/\/)?(.*)$/i.exec(text);
    return match ? new Uri(match[1], match[2]) : new Uri('file', text);
  }
  toString() {
    return `${this.scheme}://${this.path}`;
  }
  toJSON() {
    return this.toString();
  }
}

class Position {
  constructor(line, character) {
    this.line = line;
    this.character = character;
  }
}

/** Everything the extension asked of VS Code, for the tests to inspect. */
const recorded = {
  commands: new Map(),
  executed: [],
  messages: [],
  statusItems: [],
  terminals: [],
  configurationUpdates: [],
  contextKeys: new Map(),
};

/** Test-controlled state: settings by full key, open documents, folders, answers to prompts. */
const state = {
  settings: new Map(),
  answers: { error: undefined, information: undefined, inputBox: undefined, quickPick: undefined, openDialog: undefined },
};

const events = {
  openDocument: new EventEmitter(),
  saveDocument: new EventEmitter(),
  changeConfiguration: new EventEmitter(),
};

function getConfiguration(section = '') {
  const fullKey = (key) => (section ? `${section}.${key}` : key);
  const nestedValue = (prefix) => {
    // VS Code nests dotted keys: get('inlayHints') returns { enable: ... }.
    const nested = {};
    for (const [key, value] of state.settings) {
      if (key.startsWith(`${prefix}.`)) nested[key.slice(prefix.length + 1)] = value;
    }
    return Object.keys(nested).length ? nested : undefined;
  };
  return {
    get(key, fallback) {
      const full = fullKey(key);
      const value = state.settings.has(full) ? state.settings.get(full) : nestedValue(full);
      return value === undefined ? fallback : value;
    },
    has: (key) => state.settings.has(fullKey(key)),
    inspect: () => undefined,
    async update(key, value, target) {
      recorded.configurationUpdates.push({ key: fullKey(key), value, target });
      state.settings.set(fullKey(key), value);
    },
  };
}

function message(level) {
  return (text, ...actions) => {
    recorded.messages.push({ level, text, actions });
    return Promise.resolve(state.answers[level]);
  };
}

/** Any unknown function returns a disposable, any unknown class is empty: enough for the client's wiring. */
function permissive(target) {
  return new Proxy(target, {
    get(object, name) {
      if (name in object || typeof name !== 'string') return object[name];
      if (name.startsWith('onDid') || name.startsWith('onWill')) return () => new Disposable();
      if (/^[A-Z]/.test(name)) return (object[name] = class {});
      return () => new Disposable();
    },
  });
}

const workspace = permissive({
  textDocuments: [],
  workspaceFolders: undefined,
  notebookDocuments: [],
  getConfiguration,
  getWorkspaceFolder: () => undefined,
  onDidOpenTextDocument: events.openDocument.event,
  onDidSaveTextDocument: events.saveDocument.event,
  onDidChangeConfiguration: events.changeConfiguration.event,
});

const window = permissive({
  activeTextEditor: undefined,
  visibleTextEditors: [],
  createOutputChannel(name) {
    const lines = [];
    return permissive({ name, lines, append: (text) => lines.push(text), appendLine: (text) => lines.push(text), show() {}, dispose() {} });
  },
  showErrorMessage: message('error'),
  showWarningMessage: message('warning'),
  showInformationMessage: message('information'),
  showInputBox: async () => state.answers.inputBox,
  showOpenDialog: async () => state.answers.openDialog,
  showQuickPick: async (items) => (await items).find((item) => item.label === state.answers.quickPick),
  createTerminal(options) {
    const terminal = { options, sent: [], show() {}, sendText: (text) => terminal.sent.push(text), dispose() {} };
    recorded.terminals.push(terminal);
    return terminal;
  },
  setStatusBarMessage: () => new Disposable(),
});

const commands = {
  registerCommand(id, handler) {
    // VS Code refuses a second registration of the same id; so does the stub.
    if (recorded.commands.has(id)) throw new Error(`command '${id}' already exists`);
    recorded.commands.set(id, handler);
    return new Disposable(() => recorded.commands.delete(id));
  },
  async executeCommand(id, ...args) {
    recorded.executed.push({ id, args });
    if (id === 'setContext') {
      recorded.contextKeys.set(args[0], args[1]);
      return undefined;
    }
    const handler = recorded.commands.get(id);
    if (!handler) throw new Error(`command '${id}' not found`);
    return handler(...args);
  },
  getCommands: async () => [...recorded.commands.keys()],
};

const languages = permissive({
  createLanguageStatusItem(id, selector) {
    const item = { id, selector, dispose() {} };
    recorded.statusItems.push(item);
    return item;
  },
  match: () => 0,
});

module.exports = permissive({
  version: '1.85.0',
  Disposable,
  EventEmitter,
  Uri,
  Position,
  workspace,
  window,
  commands,
  languages,
  extensions: permissive({ all: [], getExtension: () => undefined }),
  env: permissive({ language: 'en', appName: 'stub', machineId: 'stub', sessionId: 'stub', uiKind: 1 }),
  LanguageStatusSeverity: { Information: 0, Warning: 1, Error: 2 },
  ConfigurationTarget: { Global: 1, Workspace: 2, WorkspaceFolder: 3 },
  UIKind: { Desktop: 1, Web: 2 },
  __stub: { recorded, state, events, reset },
});

/** Back to a fresh window: no documents, folders, settings, answers or records. */
function reset() {
  for (const value of Object.values(recorded)) {
    if (value instanceof Map) value.clear();
    else value.length = 0;
  }
  state.settings.clear();
  for (const key of Object.keys(state.answers)) state.answers[key] = undefined;
  Object.values(events).forEach((emitter) => emitter.dispose());
  workspace.textDocuments = [];
  workspace.workspaceFolders = undefined;
  window.activeTextEditor = undefined;
}

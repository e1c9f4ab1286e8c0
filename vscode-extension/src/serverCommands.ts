// Commands the server executes (`workspace/executeCommand`). The language client
// registers a VS Code command for each one the server declares; this module fills
// in arguments when a command comes from the palette instead of a hint or action.

export const MEASURE = 'kernelcast.measure';
export const SET_REFERENCE = 'kernelcast.setReference';
export const CLEAR_CACHE = 'kernelcast.clearCache';
export const SERVER_COMMANDS: readonly string[] = [MEASURE, SET_REFERENCE, CLEAR_CACHE];

export interface KernelLocation {
  uri: string;
  position: { line: number; character: number };
}

export interface ArgumentSources {
  /** The active editor's document and cursor, or undefined (after telling the user) when there is none. */
  cursor(): KernelLocation | undefined;
  /** Asks the user for a reference path; undefined when they cancel. */
  askReference(): Promise<string | undefined>;
}

/**
 * Registering a command the client already registered throws in VS Code, so
 * only the server commands the server did not declare get a client-side one.
 */
export function commandsToRegisterOnClient(declaredByServer: readonly string[] | undefined): string[] {
  const declared = new Set(declaredByServer ?? []);
  return SERVER_COMMANDS.filter((command) => !declared.has(command));
}

/** The arguments to send, or undefined when the user cancelled or there is no kernel to point at. */
export async function completeArguments(
  command: string,
  args: unknown[],
  sources: ArgumentSources,
): Promise<unknown[] | undefined> {
  if (command === MEASURE && args.length === 0) {
    const location = sources.cursor();
    return location && [location];
  }
  if (command === SET_REFERENCE && !hasReference(args[0])) {
    // A code action may already name the kernel; the palette names none.
    const location = isKernelLocation(args[0]) ? args[0] : sources.cursor();
    const reference = location && (await sources.askReference())?.trim();
    return reference ? [{ ...location, reference }] : undefined;
  }
  return args;
}

function isKernelLocation(value: unknown): value is KernelLocation {
  const candidate = value as Partial<KernelLocation> | undefined;
  return typeof candidate?.uri === 'string' && typeof candidate.position?.line === 'number';
}

function hasReference(value: unknown): boolean {
  return isKernelLocation(value) && typeof (value as { reference?: unknown }).reference === 'string';
}

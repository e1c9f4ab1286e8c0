// Which documents are worth starting the server for. CUDA files always are;
// Python files only when they mention a GPU-kernel API, so ordinary Python
// projects never start a process.

export const KERNEL_LANGUAGES: readonly string[] = ['cuda-cpp', 'cuda'];
export const PYTHON_LANGUAGE = 'python';

/** Words that mark a Python file as holding Triton, torch load_inline or CuPy RawKernel code. */
export const PYTHON_KERNEL_MARKERS = /\b(?:triton|load_inline|RawKernel)\b/;

/** Schemes of real editable documents; excludes git diffs, output panes and the like. */
const DOCUMENT_SCHEMES: readonly string[] = ['file', 'untitled'];

export interface DocumentFilter {
  language: string;
  scheme: string;
}

/** The language client's document selector: every language the server handles, in editable schemes. */
export const DOCUMENT_SELECTOR: readonly DocumentFilter[] = [...KERNEL_LANGUAGES, PYTHON_LANGUAGE].flatMap(
  (language) => DOCUMENT_SCHEMES.map((scheme) => ({ language, scheme })),
);

export interface DocumentLike {
  languageId: string;
  uri: { scheme: string };
  getText(): string;
}

export function wantsServer(document: DocumentLike): boolean {
  if (!DOCUMENT_SCHEMES.includes(document.uri.scheme)) {
    return false;
  }
  if (KERNEL_LANGUAGES.includes(document.languageId)) {
    return true;
  }
  return document.languageId === PYTHON_LANGUAGE && PYTHON_KERNEL_MARKERS.test(document.getText());
}

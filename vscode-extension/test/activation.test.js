const test = require('node:test');
const assert = require('node:assert/strict');
const { DOCUMENT_SELECTOR, wantsServer } = require('../out/activation.js');

const documentOf = (languageId, text = '', scheme = 'file') => ({ languageId, uri: { scheme }, getText: () => text });

test('CUDA files always want the server', () => {
  assert.equal(wantsServer(documentOf('cuda-cpp', '')), true);
  assert.equal(wantsServer(documentOf('cuda', '')), true);
});

test('Python files want it only when they mention a kernel API', () => {
  assert.equal(wantsServer(documentOf('python', 'import triton\nimport triton.language as tl\n')), true);
  assert.equal(wantsServer(documentOf('python', 'from torch.utils.cpp_extension import load_inline\n')), true);
  assert.equal(wantsServer(documentOf('python', 'kernel = cp.RawKernel(source, "add")\n')), true);
  assert.equal(wantsServer(documentOf('python', 'import numpy as np\nprint(np.zeros(3))\n')), false);
  // Whole words only: a name that merely contains a marker is ordinary Python.
  assert.equal(wantsServer(documentOf('python', 'tritonic = load_inline_config = RawKernels = 1\n')), false);
});

test('other languages and non-file schemes do not', () => {
  assert.equal(wantsServer(documentOf('cpp', '__global__ void k() {}')), false);
  assert.equal(wantsServer(documentOf('cuda-cpp', '', 'git')), false);
  assert.equal(wantsServer(documentOf('python', 'import triton', 'output')), false);
  assert.equal(wantsServer(documentOf('cuda-cpp', '', 'untitled')), true);
});

test('an ordinary Python file is never read past the language check', () => {
  let read = false;
  wantsServer({ languageId: 'javascript', uri: { scheme: 'file' }, getText: () => ((read = true), '') });
  assert.equal(read, false);
});

test('the client selector covers every activation language in editable schemes', () => {
  const languages = new Set(DOCUMENT_SELECTOR.map((filter) => filter.language));
  assert.deepEqual([...languages].sort(), ['cuda', 'cuda-cpp', 'python']);
  assert.ok(DOCUMENT_SELECTOR.every((filter) => ['file', 'untitled'].includes(filter.scheme)));
});

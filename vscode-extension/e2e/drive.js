// Drives a running code-server in headless Chromium and asserts what a person would see:
// the kernelcast inlay hint, Ctrl+click on its measure part, the palette command and the
// workspace toggle. Usage: node drive.js URL WORKSPACE LOGS_DIR (see run.sh).
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const puppeteer = require('puppeteer-core');

const [url, workspace, logsDir] = process.argv.slice(2);
const chromium = process.env.CHROMIUM ?? '/usr/lib/chromium/chromium';
const screenshots = process.env.SCREENSHOTS ?? path.join(logsDir, '..');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(condition, what, timeoutMs = 90_000) {
  for (const started = Date.now(); Date.now() - started < timeoutMs; await sleep(500)) {
    const value = await condition();
    if (value) return value;
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The kernelcast output channel as VS Code writes it to disk (server log and LSP trace). */
function kernelcastLog() {
  const logs = [];
  const walk = (folder) =>
    fs.readdirSync(folder, { withFileTypes: true }).forEach((entry) => {
      const full = path.join(folder, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('kernelcast.log')) logs.push(full);
    });
  walk(logsDir);
  return logs.map((file) => fs.readFileSync(file, 'utf8')).join('\n');
}
const executeCommandCount = () => (kernelcastLog().match(/Sending request 'workspace\/executeCommand/g) ?? []).length;

async function runFromPalette(page, title) {
  await page.keyboard.press('F1');
  await sleep(700);
  await page.keyboard.type(title, { delay: 15 });
  await sleep(1200);
  await page.keyboard.press('Enter');
}

/** Leaf spans of the editor's text, inlay hint parts included (VS Code renders them as injected text). */
const hintParts = (page) =>
  page.evaluate(() =>
    [...document.querySelectorAll('.monaco-editor .view-lines span')]
      .filter((span) => span.children.length === 0 && /⏱|measure|set one/.test(span.textContent))
      .map((span) => {
        const box = span.getBoundingClientRect();
        return { text: span.textContent, x: box.x + box.width / 2, y: box.y + box.height / 2 };
      }),
  );

(async () => {
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--window-size=2400,900'],
    defaultViewport: { width: 2400, height: 900 },
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${url}/?folder=${workspace}`, { waitUntil: 'domcontentloaded' });
    await page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
    await sleep(3000);
    await page.keyboard.down('Control');
    await page.keyboard.press('p');
    await page.keyboard.up('Control');
    await sleep(800);
    await page.keyboard.type('vector_add_float4.cu', { delay: 20 });
    await sleep(1200);
    await page.keyboard.press('Enter');

    const parts = await until(async () => {
      const found = await hintParts(page);
      return found.some((part) => part.text.includes('measure')) && found;
    }, 'the inlay hint with a measure part');
    console.log('inlay hint:', parts.map((part) => part.text).join(''));
    await page.screenshot({ path: path.join(screenshots, 'e2e-hint.png') });

    // VS Code runs a label part's command on Ctrl+click (Cmd+click on macOS), not on a plain click.
    const measure = parts.find((part) => part.text.includes('measure'));
    const before = executeCommandCount();
    await page.mouse.move(measure.x, measure.y);
    await page.keyboard.down('Control');
    await page.mouse.move(measure.x + 1, measure.y);
    await sleep(300);
    await page.mouse.click(measure.x + 1, measure.y);
    await page.keyboard.up('Control');
    await until(() => executeCommandCount() > before, 'workspace/executeCommand after Ctrl+click', 15_000);
    console.log('Ctrl+click on the measure part sent workspace/executeCommand');

    // Palette: cursor inside the kernel body, then the command.
    const bodyLine = await page.evaluate(() => {
      const line = [...document.querySelectorAll('.monaco-editor .view-line')].find((l) => l.textContent.includes('blockIdx.x'));
      const box = line.getBoundingClientRect();
      return { x: box.x + 80, y: box.y + box.height / 2 };
    });
    await page.mouse.click(bodyLine.x, bodyLine.y);
    const beforePalette = executeCommandCount();
    await runFromPalette(page, 'kernelcast: Measure Kernel Under Cursor');
    await until(() => executeCommandCount() > beforePalette, 'workspace/executeCommand from the palette', 15_000);
    assert.match(kernelcastLog(), /"command": "kernelcast\.measure",\s*"arguments": \[\s*\{\s*"uri": "file:\/\/[^"]*vector_add_float4\.cu",\s*"position": \{\s*"line": 4/);
    console.log('palette "Measure Kernel Under Cursor" sent kernelcast.measure at line 4');

    await runFromPalette(page, 'kernelcast: Toggle Inline Hints for This Workspace');
    const settingsFile = path.join(workspace, '.vscode', 'settings.json');
    await until(() => fs.existsSync(settingsFile) && /"kernelcast\.inlayHints\.enable":\s*false/.test(fs.readFileSync(settingsFile, 'utf8')), 'the workspace setting');
    await until(async () => (await hintParts(page)).length === 0, 'the hints to disappear', 20_000);
    console.log('toggle wrote kernelcast.inlayHints.enable=false to the workspace and the hints went away');
    await page.screenshot({ path: path.join(screenshots, 'e2e-toggled.png') });

    const status = await page.evaluate(() =>
      [...document.querySelectorAll('.statusbar-item')]
        .map((item) => item.getAttribute('aria-label') ?? '')
        .find((label) => label.startsWith('Editor Language Status')),
    );
    assert.match(status ?? '', /kernelcast: (idle|forecasting|measuring)/);
    console.log('language status:', status);
    console.log('e2e: all checks passed');
  } finally {
    await browser.close();
  }
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

// Drives a running code-server in headless Chromium and asserts what a person would see:
// the inlay hint the kernelcast server sent, rendered on the kernel's line; Ctrl+click on its
// measure part, the palette command and the workspace toggle. On failure it saves
// e2e-failure.png. Usage: node drive.js URL WORKSPACE LOGS_DIR (see run.sh).
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const puppeteer = require('puppeteer-core');

const [url, workspace, logsDir] = process.argv.slice(2);
const chromium = process.env.CHROMIUM ?? '/usr/lib/chromium/chromium';
const screenshots = process.env.SCREENSHOTS ?? path.join(logsDir, '..');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const FILE = 'vector_add_float4.cu';
// A forecast in the kernelcast form (kernelcast/wire.py inlay_label), whichever the model gives.
const FORECAST_LABEL = /^⏱ ((\d+\.\d× (faster|slower)|about the same) · \d{1,3}%|uncertain · measure\?)$/;

async function until(condition, what, timeoutMs = 180_000) {
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

/** The JSON bodies of the traced messages for `method`, by request id: {params} sent, {result} received. */
function traced(method) {
  const byId = new Map();
  const entries = kernelcastLog().split(/^\[Trace - [^\]]*\] /m);
  for (const entry of entries) {
    const header = entry.match(/^(Sending request|Received response) '([^']+) - \((\d+)\)'/);
    if (!header || header[2] !== method) continue;
    const body = entry.match(/^(Params|Result): ([\s\S]*)$/m);
    if (!body) continue;
    const message = byId.get(header[3]) ?? {};
    message[body[1] === 'Params' ? 'params' : 'result'] = JSON.parse(body[2].trim());
    byId.set(header[3], message);
  }
  return [...byId.values()];
}

/** The labels of the latest inlay hints the server sent for `file`, as one string each. */
function serverHintLabels(file) {
  const answered = traced('textDocument/inlayHint').filter(
    (message) => message.params?.textDocument?.uri?.endsWith(`/${file}`) && Array.isArray(message.result),
  );
  const latest = answered.at(-1)?.result ?? [];
  return latest.map((hint) => (typeof hint.label === 'string' ? hint.label : hint.label.map((part) => part.value).join('')));
}

/** The text of the editor line holding `marker`, inlay hints included (VS Code injects them as spans). */
const renderedLine = (page, marker) =>
  page.evaluate((marker) => {
    const line = [...document.querySelectorAll('.monaco-editor .view-line')].find((l) => l.textContent.includes(marker));
    return line ? line.textContent.replace(/\u00a0/g, ' ') : null;
  }, marker);

/** Quick Open (Ctrl+P) the file, waiting for each step: a busy machine drops keys sent too early. */
async function openFile(page, file) {
  const listed = () =>
    page.evaluate((file) => [...document.querySelectorAll('.quick-input-list .monaco-list-row')].some((row) => row.textContent.includes(file)), file);
  await until(async () => {
    await page.keyboard.press('Escape');
    await page.keyboard.down('Control');
    await page.keyboard.press('p');
    await page.keyboard.up('Control');
    await sleep(800);
    await page.keyboard.type(file, { delay: 20 });
    if (!(await until(listed, `${file} in Quick Open`, 15_000).catch(() => false))) return false;
    await page.keyboard.press('Enter');
    return until(async () => (await renderedLine(page, '__global__')) !== null, `${file} in an editor`, 15_000).catch(() => false);
  }, `${file} to open`, 120_000);
}

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
  let page;
  try {
    page = await browser.newPage();
    await page.goto(`${url}/?folder=${workspace}`, { waitUntil: 'domcontentloaded' });
    await page.waitForSelector('.monaco-workbench', { timeout: 60_000 });
    await sleep(3000);
    await openFile(page, FILE);

    // What the server sent, whatever the forecast says, and that VS Code shows exactly that.
    const [label] = await until(() => {
      const log = kernelcastLog();
      if (/Server process exited|Connection to server got closed/.test(log)) throw new Error(`the server died:\n${log.slice(-3000)}`);
      const labels = serverHintLabels(FILE);
      return labels.length > 0 && labels;
    }, `an inlay hint for ${FILE} in the server's trace`);
    assert.match(label, FORECAST_LABEL, `the server's hint is not a kernelcast forecast: ${label}`);
    await until(async () => (await renderedLine(page, '__global__'))?.includes(label), `the editor to show "${label}" on the kernel's line`, 30_000);
    console.log('server sent and VS Code shows:', label);
    await page.screenshot({ path: path.join(screenshots, 'e2e-hint.png') });

    // A threshold of 1 makes every forecast defer, so the hint has a `measure?` part to click
    // whatever the model's confidence; the change reaches the server as a configuration change.
    const settingsFile = path.join(workspace, '.vscode', 'settings.json');
    fs.mkdirSync(path.dirname(settingsFile), { recursive: true });
    fs.writeFileSync(settingsFile, '{ "kernelcast.confidenceThreshold": 1 }\n');
    const parts = await until(async () => {
      const found = await hintParts(page);
      return found.some((part) => part.text.includes('measure')) && found;
    }, 'the hint to defer to measuring after confidenceThreshold=1');
    await until(() => serverHintLabels(FILE).join() === '⏱ uncertain · measure?', 'the server to send the deferring hint', 30_000);

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
  } catch (error) {
    if (page) await page.screenshot({ path: path.join(screenshots, 'e2e-failure.png') }).catch(() => {});
    throw error;
  } finally {
    await browser.close();
  }
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

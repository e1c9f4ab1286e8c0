// Unpacks the built .vsix into a temporary folder so tests load exactly what ships.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { readZip } = require('./zip.js');

const root = path.join(__dirname, '..');

function extractVsix() {
  const { version } = require('../package.json');
  const archive = path.join(root, `kernelcast-${version}.vsix`);
  if (!fs.existsSync(archive)) {
    throw new Error(`${archive} is missing: run \`npm run package\` (npm test does it in pretest)`);
  }
  const files = readZip(fs.readFileSync(archive));
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'kernelcast-vsix-'));
  process.on('exit', () => fs.rmSync(folder, { recursive: true, force: true }));
  for (const [name, content] of files) {
    fs.mkdirSync(path.dirname(path.join(folder, name)), { recursive: true });
    fs.writeFileSync(path.join(folder, name), content);
  }
  const manifest = JSON.parse(files.get('extension/package.json').toString());
  const loadExtension = () => {
    require('./stub/register.js');
    return require(path.join(folder, 'extension', manifest.main));
  };
  return { files, manifest, loadExtension };
}

module.exports = { extractVsix };

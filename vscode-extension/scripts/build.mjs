// Bundles the extension and vscode-languageclient into one file, so the .vsix ships no node_modules.
import { build } from 'esbuild';

await build({
  entryPoints: ['src/extension.ts'],
  outfile: 'dist/extension.js',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node18',
  external: ['vscode'],
  minify: true,
  keepNames: true,
  sourcemap: false,
  logLevel: 'warning',
});

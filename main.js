// Entry point: `node main.js node.yaml`. The server is TypeScript compiled to dist/ by `npm install`
// (or `npm run build`); this file only checks that the build is there and starts it.
import { existsSync } from 'node:fs';

const entry = new URL('./dist/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('stowage: dist/ is missing; run `npm install` (it builds) or `npm run build` first\n');
  process.exit(2);
}
await import(entry.href);

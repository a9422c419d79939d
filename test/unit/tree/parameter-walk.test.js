// A request parameter's walk (docs/architecture.md, "A request parameter's walk"): a parameter the
// device sees is read, carried and handed over in the four files the page lists, for both protocols
// and on every thread. Held with Triton's `priority`: on its way from the wire to the device's inbox
// (the protocol's files, the edges, the rooms, the path, the data plane and the channels a request
// crosses), the files that name it in code are exactly the page's. A decoder that lists parameters
// field by field again, or a room that carries one by name, fails here until the page says so.
import path from 'node:path';
import test from 'ava';
import { filesUnder, readSource, splitComments } from '../../helpers/source-tree.js';

/** The files the page lists after "parameter walk:". */
function walkOfThePage() {
  const m = /\nparameter walk: ([^\n]+)\n/.exec(readSource('docs/architecture.md'));
  if (!m) throw new Error('docs/architecture.md has no "parameter walk:" line');
  return m[1].split(',').map((s) => path.join('src', s.trim())).sort();
}

/** Every file a request crosses from the wire to the device's inbox; model-config.ts answers metadata, not requests. */
const ON_THE_WAY = [
  ...filesUnder('src/protocol', /\.ts$/).filter((f) => !f.endsWith('model-config.ts')),
  ...filesUnder('src/actors/edge', /\.ts$/),
  ...filesUnder('src/actors/rooms', /\.ts$/),
  'src/shared/data-plane.ts', 'src/shared/request-path.ts', 'src/shared/request-check.ts', 'src/shared/channels/inference.ts',
  'src/actors/device/door.ts',
];

test('a parameter the device sees is named in the four files of the page, and nowhere else on its way', (t) => {
  const page = walkOfThePage();
  t.is(page.length, 4, 'the issue asks for at most 4');
  const naming = ON_THE_WAY.filter((f) => /\bpriority\b/.test(splitComments(readSource(f)).code)).sort();
  t.deepEqual(naming, page);
});

// Comments fit in 120 columns (issue 63): a comment line of src/ that runs past column 120 fails
// here, a trailing one too (its code's width counts). The one exception is a Markdown table's row
// in a comment (`* | ... |`): request-path.ts's copy table is read row by row by
// test/integration/copies.test.js, and a row cannot wrap.
import test from 'ava';
import { filesUnder, readSource, splitComments } from '../../helpers/source-tree.js';

const WIDTH = 120;

test(`every comment of src/ ends by column ${WIDTH}, but a table's rows`, (t) => {
  const wide = [];
  let lines = 0;
  for (const file of filesUnder('src', /\.(ts|mts|mjs|cc|h)$/)) {
    const source = readSource(file).split('\n');
    for (const [i, comment] of splitComments(readSource(file)).comments.split('\n').entries()) {
      if (comment.trim() === '') continue;
      lines++;
      if (comment.trimEnd().length > WIDTH && !/^\s*\* \|/.test(source[i])) wide.push(`${file}:${i + 1} ends at column ${comment.trimEnd().length}`);
    }
  }
  t.deepEqual(wide, []);
  t.true(lines > 5000, `${lines} comment lines read`);
});

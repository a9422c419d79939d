// The walk of a gRPC request in docs/architecture.md ("A request's walk, file by file"), held to the
// code: every file it names exists and runs on one of the two threads the walk crosses (reached by
// imports from the edge's or the device's worker), and the count of files it names is the one the
// page states. A file renamed, moved or taken off the path fails here until the page says so;
// test/integration/request-walk.test.js holds the same names to the files a request is measured
// to run through.
import path from 'node:path';
import test from 'ava';
import { reached, THREADS, walkFiles, walkSection } from '../../helpers/request-walk.js';

test('every file the request\'s walk names exists and is on the edge\'s or the device\'s thread', (t) => {
  const { files, unresolved } = walkFiles(walkSection());
  t.deepEqual(unresolved, [], 'files the walk names that src/ does not have (or has twice, with no folder to tell them apart)');
  t.true(files.length > 10, `the walk names ${files.length} files: the page's steps were not read`);
  const onThreads = reached(THREADS);
  t.deepEqual(files.filter((f) => !onThreads.has(f)), [], 'named files no import from the edge\'s or the device\'s worker reaches');
});

test('the walk names as many files as the page says', (t) => {
  const section = walkSection();
  const { files } = walkFiles(section);
  const stated = /\nFiles named: (\d+)\b/.exec(section);
  t.truthy(stated, 'the page states "Files named: N" after the steps');
  t.is(Number(stated?.[1]), files.length, `the steps name ${files.length}: ${files.map((f) => path.relative('src', f)).join(', ')}`);
  t.log(`${files.length} files: ${files.map((f) => path.relative('src', f)).join(', ')}`);
});

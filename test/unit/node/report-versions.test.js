// A node's versioned report (node/report-versions.ts): rows published once per window, each with the
// version it last changed at; an answer since a version holds only what changed after it and the
// names that left; a version it cannot answer from (another process's, from the future, or older
// than the names it forgot) gets the whole report.
import test from 'ava';
import { ReportVersions } from '../../../dist/node/report-versions.js';

/** @typedef {{ name: string, load: number, hits?: number }} Row */
const keyOf = (/** @type {Row} */ row) => `${row.load}`;
const rows = (/** @type {[string, number][]} */ entries) => new Map(entries.map(([name, load]) => [name, /** @type {Row} */ ({ name, load })]));
const names = (/** @type {{ rows: Row[] }} */ answer) => answer.rows.map((r) => r.name).sort();

test('changes since a version: the rows whose key changed, the new, the gone; the same figures leave the version', (t) => {
  const v = new ReportVersions(1000);
  v.publish(rows([['a', 1], ['b', 2], ['c', 3]]), keyOf);
  t.is(v.version, 1001);
  const first = v.answer(0);
  t.false(first.changesOnly, 'no version named: the whole report');
  t.deepEqual(names(first), ['a', 'b', 'c']);

  v.publish(rows([['a', 1], ['b', 2.5], ['d', 4]]), keyOf);
  t.is(v.version, 1002);
  const changes = v.answer(1001);
  t.true(changes.changesOnly);
  t.deepEqual(names(changes), ['b', 'd']);
  t.deepEqual(changes.gone, ['c']);
  t.is(changes.rows.find((r) => r.name === 'b').load, 2.5);

  // Nothing changed: the version stays, and an answer since it is empty.
  v.publish(rows([['a', 1], ['b', 2.5], ['d', 4]]), keyOf);
  t.is(v.version, 1002);
  t.deepEqual(v.answer(1002), { version: 1002, changesOnly: true, rows: [], gone: [] });
  // Since an older version: everything after it, c's leaving included.
  t.deepEqual(names(v.answer(1001)), ['b', 'd']);

  // A name back after it left is a row again, not gone.
  v.publish(rows([['a', 1], ['b', 2.5], ['c', 3], ['d', 4]]), keyOf);
  const back = v.answer(1001);
  t.deepEqual(names(back), ['b', 'c', 'd']);
  t.deepEqual(back.gone, []);
});

test('a row whose key is the same keeps the row first published, so a whole answer and the changes agree', (t) => {
  const v = new ReportVersions(1);
  v.publish(new Map([['a', { name: 'a', load: 1, hits: 5 }]]), keyOf);
  v.publish(new Map([['a', { name: 'a', load: 1, hits: 6 }]]), keyOf);
  t.is(v.version, 2);
  t.is(v.answer(0).rows[0].hits, 5);
});

test('a version it cannot answer from gets the whole report: another process\'s, one from the future, one older than the names it forgot', (t) => {
  const v = new ReportVersions(5000);
  v.publish(rows([['a', 1]]), keyOf);
  t.false(v.answer(4000).changesOnly, 'an earlier process\'s version (below this one\'s first)');
  t.false(v.answer(9000).changesOnly, 'a version it never gave');
  t.true(v.answer(5000).changesOnly);
  // One name leaves, then 10,000 more: past the 10,000 kept, the first to leave is forgotten, and
  // versions before it are answered whole.
  const many = new ReportVersions(1);
  const all = Array.from({ length: 10_002 }, (_, k) => /** @type {[string, number]} */ ([`m${k}`, 1]));
  many.publish(rows(all), keyOf);
  const start = many.version;
  many.publish(rows(all.slice(1)), keyOf);
  many.publish(rows(all.slice(10_001)), keyOf);
  t.false(many.answer(start).changesOnly, 'the first name gone is forgotten: since before it, whole');
  const whole = many.answer(start);
  t.deepEqual(names(whole), ['m10001']);
  const recent = many.answer(start + 1);
  t.true(recent.changesOnly);
  t.is(recent.gone.length, 10_000);
});

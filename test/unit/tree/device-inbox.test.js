// The device's inbox is its doors (issue 63): every request reaches a device actor through a door
// (actors/device/door.ts on the client's side, inbox.ts on the device's), the main thread's handle's
// included; the worker's own port carries control calls only. A second way in — an `infer` or a
// `cancel` on the worker's port, the main thread's link number (`MAIN_LINK`), a request told apart
// by the sign of its id — fails here. (test/unit/actors/device/handle.test.js holds the behaviour:
// its scripted worker answers requests on doors alone.)
import test from 'ava';
import { filesUnder, readSource, splitComments } from '../../helpers/source-tree.js';

const code = (/** @type {string} */ file) => splitComments(readSource(file)).code;

test('the worker\'s port takes no request: ToDevice has none, and the worker\'s receive has no case for one', (t) => {
  const channels = code('src/shared/channels/device.ts');
  const toDevice = channels.slice(channels.indexOf('export type ToDevice ='), channels.indexOf(';', channels.indexOf('export type ToDevice =')));
  t.true(toDevice.length > 0, 'ToDevice found');
  t.notRegex(toDevice, /InferCommand|'infer'|'cancel'/);
  const worker = code('src/actors/device/worker.ts');
  const receive = worker.slice(worker.indexOf('function receive('));
  t.true(receive.length > 0, 'the worker\'s receive found');
  t.notRegex(receive.slice(0, receive.indexOf('\n}\n')), /case '(infer|cancel)'/);
});

test('no link number of the main thread\'s own, and no request told apart by the sign of its id', (t) => {
  const found = [];
  for (const file of filesUnder('src', /\.ts$/)) {
    const source = code(file);
    if (/\bMAIN_LINK\b|\bisDoors\b/.test(source)) found.push(`${file}: a main-thread link`);
    if (/\b(id|own)\s*[<>]=?\s*0\b|\b0\s*[<>]=?\s*(id|own)\b/.test(source)) found.push(`${file}: a request id's sign tested`);
  }
  t.deepEqual(found, []);
});

test('one door class on the client\'s side, one inbox of doors on the device\'s', (t) => {
  const doorClasses = filesUnder('src', /\.ts$/).filter((file) => /\bclass \w*Door\b/.test(code(file)));
  t.deepEqual(doorClasses, ['src/actors/device/door.ts']);
  const inboxes = filesUnder('src', /\.ts$/).filter((file) => /\bclass \w*Doors\b/.test(code(file)));
  t.deepEqual(inboxes, ['src/actors/device/inbox.ts']);
});

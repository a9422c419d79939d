// A leased GPU machine's check, rehearsed on this one: tools/pack-offline.sh --with-tests packs the
// built server, Node and the tests in parts; a copy of the checkout stands in for the machine's
// (what the device tool sends: tracked files and untracked ones git does not ignore, no Node
// modules, no build); the parts arrive one call at a time and tools/gpu-lease-run.sh, run after
// each, says what is still to come, then unpacks, links what the checkout lacks and runs
// bench/gpu-check.sh's GPU suites (skipped here without a GPU, run there), their logs archived in
// $OUT. What a GPU session spends its minutes on, so a broken pack shows here first.
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { ROOT, tempDir } from '../helpers/server.js';

const run = promisify(execFile);

/**
 * tools/gpu-lease-run.sh in the stand-in checkout; its exit code and output whether it fails or not.
 * @param {string} checkout
 * @param {Record<string, string>} env
 */
async function leaseRun(checkout, env) {
  try {
    const { stdout } = await run('bash', ['tools/gpu-lease-run.sh'], { cwd: checkout, env: { ...process.env, ...env }, maxBuffer: 64 << 20 });
    return { code: 0, stdout };
  } catch (err) {
    const e = /** @type {{ code: number, stdout: string }} */ (err);
    return { code: e.code, stdout: e.stdout };
  }
}

test('the pack arrives in parts, one call each, and the last call unpacks it and runs the GPU suites from it', async (t) => {
  t.timeout(600_000);
  const temp = tempDir('stowage-gpu-lease-');
  t.teardown(temp.cleanup);

  // Small parts at xz's fastest preset: several parts, quickly.
  const packed = path.join(temp.dir, 'packed');
  await run('bash', ['tools/pack-offline.sh', packed, '20', '--with-tests'], { cwd: ROOT, env: { ...process.env, PACK_XZ_LEVEL: '0' }, maxBuffer: 64 << 20 });
  const parts = readdirSync(packed).filter((f) => f.startsWith('stowage.tar.xz.part-')).sort();
  t.true(parts.length >= 3, `${parts.length} parts`);

  const checkout = path.join(temp.dir, 'checkout');
  const { stdout: files } = await run('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, maxBuffer: 64 << 20 });
  for (const file of files.split('\0').filter(Boolean)) {
    if (!existsSync(path.join(ROOT, file))) continue; // deleted, not yet committed
    mkdirSync(path.dirname(path.join(checkout, file)), { recursive: true });
    copyFileSync(path.join(ROOT, file), path.join(checkout, file));
  }
  t.false(existsSync(path.join(checkout, 'node_modules')));
  const pack = path.join(checkout, '.gpu-lease', 'pack');
  mkdirSync(pack, { recursive: true });
  const out = path.join(temp.dir, 'out');
  mkdirSync(out);
  const env = { OUT: out, GPU_CHECK_STEPS: 'gpu-tests' };

  const before = await leaseRun(checkout, env);
  t.is(before.code, 2);
  t.regex(before.stdout, /no \.gpu-lease\/pack\/SHA256SUMS yet/);

  for (const f of [parts[0], 'SHA256SUMS', 'unpack.sh']) copyFileSync(path.join(packed, f), path.join(pack, f));
  const first = await leaseRun(checkout, env);
  t.is(first.code, 0);
  t.regex(first.stdout, new RegExp(`1 of ${parts.length} parts here`));
  t.regex(first.stdout, new RegExp(`still to come: ${parts.slice(1).join(' ')}`));
  t.false(existsSync(path.join(checkout, '.gpu-lease', 'unpacked')), 'nothing unpacked before the last part');

  for (const f of parts.slice(1)) copyFileSync(path.join(packed, f), path.join(pack, f));
  const last = await leaseRun(checkout, env);
  t.is(last.code, 0, last.stdout);
  t.regex(last.stdout, new RegExp(`${parts.length} of ${parts.length} parts here`));
  t.regex(last.stdout, /gpu-lease: node v2[4-9]\.\d+\.\d+ from the pack/);
  t.regex(last.stdout, /=== gpu-tests: exit 0/);
  t.regex(last.stdout, /=== bench-gpu: not in GPU_CHECK_STEPS/);
  // The checkout's own files, the pack's build: dist and node_modules are links into the unpacked tree.
  const unpacked = realpathSync(path.join(checkout, '.gpu-lease', 'unpacked', 'stowage'));
  t.is(readlinkSync(path.join(checkout, 'dist')), path.join(unpacked, 'dist'));
  t.is(readlinkSync(path.join(checkout, 'node_modules')), path.join(unpacked, 'node_modules'));
  t.deepEqual(readdirSync(out).sort(), ['gpu-check-logs.tar.gz', 'gpu-check.log'], 'two files whatever the number of steps');
  const { stdout: listing } = await run('tar', ['-tzf', path.join(out, 'gpu-check-logs.tar.gz')]);
  t.true(listing.split('\n').includes('./gpu-tests.log'), listing);
  // The suites ran: ava's summary in the step's log (every test skipped where there is no GPU).
  const { stdout: log } = await run('tar', ['-xzOf', path.join(out, 'gpu-check-logs.tar.gz'), './gpu-tests.log']);
  t.regex(log, /\d+ tests? (passed|skipped)/);
  t.regex(readFileSync(path.join(out, 'gpu-check.log'), 'utf8'), /=== gpu-tests: exit 0/, 'the whole output in $OUT too');

  // A second call on the same machine unpacks nothing again.
  const again = await leaseRun(checkout, { ...env, GPU_LEASE_DRY: '1' });
  t.is(again.code, 0);
  t.notRegex(again.stdout, /unpacked in/);
  t.regex(again.stdout, /GPU_LEASE_DRY=1, gpu-check\.sh not run/);
});

test('a check cut by its deadline ends by itself within it, every finished step\'s log in $OUT: a step that never ends is killed, the next skipped', async (t) => {
  t.timeout(120_000);
  const temp = tempDir('stowage-gpu-deadline-');
  t.teardown(temp.cleanup);
  const out = path.join(temp.dir, 'out');
  const started = performance.now();
  // The deadline a leased call's limit asks for, scaled down from 540 s to 60 s.
  const result = await run('bash', ['bench/gpu-check.sh', path.join(temp.dir, 'logs')], {
    cwd: ROOT,
    env: { ...process.env, GPU_CHECK_DEADLINE_S: '60', GPU_CHECK_OUT: out, GPU_CHECK_STEPS: 'rehearse-quick,rehearse-hang,rehearse-after' },
  }).then(() => ({ code: 0 }), (err) => ({ code: /** @type {{ code: number }} */ (err).code }));
  const seconds = (performance.now() - started) / 1000;
  t.true(seconds < 60, `ended after ${seconds.toFixed(1)} s`);
  t.is(result.code, 1, 'a cut or skipped step fails the check');
  const log = readFileSync(path.join(out, 'gpu-check.log'), 'utf8');
  t.regex(log, /\[rehearse-quick\] a step that ends at once/);
  t.regex(log, /=== rehearse-quick: exit 0/);
  t.regex(log, /=== rehearse-hang: cut at \d+ s \(its limit or the deadline\)/);
  t.regex(log, /=== rehearse-after: skipped, \d+ s left before the deadline/);
  t.notRegex(log, /never run/);
  const { stdout: listing } = await run('tar', ['-tzf', path.join(out, 'gpu-check-logs.tar.gz')]);
  t.true(['./rehearse-quick.log', './rehearse-hang.log'].every((f) => listing.split('\n').includes(f)), listing);
  t.log(`cut by a 60 s deadline after ${seconds.toFixed(1)} s`);
});

// What bench/peers/run.js and density.js share: starting a peer's Python server and waiting for
// its models, a free port for it, waiting for an idle machine before a point, and measuring one
// point with the CPU that anything else used meanwhile.
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { ROOT } from '../../test/helpers/server.js';
import { InferenceClient } from '../../dist/client/client.js';
import { machineCpu, treeCpuUs } from '../proc-cpu.js';

/** The peers' virtual environments (setup.sh). */
export const PEERS = path.join(ROOT, '.toolchain', 'peers');

/** A free port on 127.0.0.1 (bound and released; the peers take a port number, not 0). */
export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * Start a peer's Python process (`scriptArgs(grpcPort, httpPort)` gives its arguments) and wait
 * until every one of `modelNames` is ready, for at most `readyWithinMs`. `env` is added to its
 * environment. Resolves to { name, address, pid, stop }.
 */
export async function startPeer(name, venv, script, scriptArgs, { modelNames, env = {}, readyWithinMs = 180_000 }) {
  const port = await freePort();
  const child = spawn(path.join(PEERS, venv, 'bin', 'python'), [path.join(ROOT, 'bench', 'peers', script), ...scriptArgs(port, await freePort())], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env, PYTHONPATH: path.join(ROOT, 'bench', 'peers') },
  });
  const log = [];
  for (const stream of [child.stdout, child.stderr]) createInterface({ input: stream }).on('line', (line) => log.push(line));
  const address = `127.0.0.1:${port}`;
  const client = new InferenceClient(address);
  const deadline = Date.now() + readyWithinMs;
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${name} exited ${child.exitCode}:\n${log.slice(-30).join('\n')}`);
      const ready = await Promise.all(modelNames.map((model) => client.call('ModelReady', { name: model }).then((r) => r.ready, () => false)));
      if (ready.every(Boolean)) break;
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`${name} was not ready within ${readyWithinMs / 1000} s:\n${log.slice(-30).join('\n')}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  } finally {
    client.close();
  }
  return {
    name, address, pid: child.pid, log,
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once('exit', resolve);
      child.kill('SIGINT');
      setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
    }),
  };
}

/** Wait until the machine is idle: under 15% busy over half a second, for at most 10 s. Returns the last busy fraction. */
export async function waitForIdle() {
  let busy = 1;
  const until = Date.now() + 10_000;
  while (Date.now() < until) {
    const a = machineCpu();
    await new Promise((resolve) => setTimeout(resolve, 500));
    const b = machineCpu();
    busy = (b.busy - a.busy) / (b.total - a.total);
    if (busy < 0.15) break;
  }
  return busy;
}

/**
 * One point: wait for an idle machine, then `measure()` (which resolves to its figures and
 * `clientUs`, the CPU its load generator used); adds how busy the machine was before
 * (`idleBefore`), and the server's and everything else's CPU during the point, in cores
 * (`serverCpu`, `otherCpu`: machine minus the server's process tree minus the client).
 */
export async function measuredPoint(serverPid, measure) {
  const idleBefore = await waitForIdle();
  const m0 = machineCpu();
  const s0 = treeCpuUs(serverPid);
  const t0 = performance.now();
  const r = await measure();
  const wallUs = (performance.now() - t0) * 1000;
  const m1 = machineCpu();
  const s1 = treeCpuUs(serverPid);
  const otherUs = (m1.busy - m0.busy) - (s1 - s0) - r.clientUs;
  return { ...r, idleBefore, otherCpu: Math.max(0, otherUs) / wallUs, serverCpu: (s1 - s0) / wallUs };
}

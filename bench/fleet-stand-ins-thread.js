// The stand-in nodes of bench/fleet-stand-ins.js on a thread of their own, so that a bench measuring
// a gateway's requests does not measure the stand-ins' work in its own event loop: at 64 nodes each
// check makes them encode 64 status answers, and a request the bench sends meanwhile waited behind
// that, not behind the gateway. The same surface as StandInFleet for what the benches use: start,
// stop, catalog, capacity, a node's restart, and the status reads and prefetches counted.
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { StandInFleet } from './fleet-stand-ins.js';

if (!isMainThread && workerData?.standIns) {
  const fleet = new StandInFleet(workerData.standIns);
  parentPort.on('message', async ({ id, call, index, options }) => {
    let value;
    if (call === 'start') value = await fleet.start();
    else if (call === 'restart') value = await fleet.nodes[index].restart(options);
    else if (call === 'counts') value = { statusReads: fleet.nodes.reduce((s, n) => s + n.statusReads, 0), prefetches: fleet.nodes.reduce((s, n) => s + n.prefetches, 0) };
    else if (call === 'stop') value = await fleet.stop();
    parentPort.postMessage({ id, value });
  });
}

export class StandInFleetThread {
  /** @param {{ nodes: number, models: number, capacity: number, weightBytes: number, fleetLoad: number, churn?: number, windowMs?: number }} options */
  constructor(options) {
    this.capacity = options.capacity;
    this.catalog = Array.from({ length: options.models }, (_, k) => `m${String(k).padStart(5, '0')}`);
    this.worker = new Worker(new URL(import.meta.url), { workerData: { standIns: options } });
    this.calls = new Map();
    this.next = 1;
    this.worker.on('message', ({ id, value }) => {
      this.calls.get(id)?.(value);
      this.calls.delete(id);
    });
    /** Each node's restart, as StandInNode's: `{ repositoryChanged }` gives it a new digest. */
    this.nodes = Array.from({ length: options.nodes }, (_, index) => ({ restart: (/** @type {{ repositoryChanged?: boolean }} */ o = {}) => this.call('restart', index, o) }));
  }

  call(call, index, options) {
    const id = this.next++;
    return new Promise((resolve) => {
      this.calls.set(id, resolve);
      this.worker.postMessage({ id, call, index, options });
    });
  }

  start() {
    return this.call('start');
  }

  counts() {
    return this.call('counts');
  }

  async stop() {
    await this.call('stop');
    await this.worker.terminate();
  }
}

/**
 * Why the node cannot run a request that the main thread's rooms could not take
 * (actors/rooms/rooms.ts: their `elsewhere` on the main thread). The main thread's rooms hear of
 * every change before any edge's (in-process), so no thread could take it: the answer is the
 * reason, worded by what knows it — the registry (an unknown model or version, a model not
 * ready, and why), the shared-memory registry (a region not registered), the device pool (no
 * device in service, or none that holds the model). Traced, the refusal is a span of its own, ended
 * with its error (no rooms made one for a request they did not take).
 */
import type { DataPlaneRequest, InferenceAnswer, InferOptions } from '../shared/data-plane.js';
import { MODEL_VERSION } from '../shared/constants.js';
import { RequestTrace } from '../shared/tracing.js';
import { errors } from '../shared/errors.js';
import type { Devices } from './devices.js';
import { ModelState, type ModelRecord, type ModelRegistry } from './model-registry.js';
import type { SharedMemoryRegistry } from './shared-memory.js';

export interface RefusalSources {
  registry: ModelRegistry;
  sharedMemory: SharedMemoryRegistry;
  devices: Devices;
}

/** The error that says why `req` cannot run on this node now. */
export function refusalOf(req: DataPlaneRequest, { registry, sharedMemory, devices }: RefusalSources): Error {
  let record: ModelRecord;
  try {
    record = registry.find(req.model, req.version);
  } catch (err) {
    return err as Error; // NOT_FOUND: the model, or the version
  }
  if (record.state !== ModelState.READY || !record.spec || !record.instance) return errors.modelNotReady(record.name, record.state, record.reason);
  const regions = [...req.inputs.flatMap((t) => (t.bytes.kind === 'region' ? [t.bytes.region] : [])), ...req.outputs.flatMap((o) => (o.region ? [o.region.region] : []))];
  const unknown = regions.find((name) => !sharedMemory.serves(name));
  if (unknown !== undefined) return errors.sharedMemoryNotFound(unknown);
  return devices.unavailable(record.instance);
}

/** The request refused saying why, its span (when traced) ended with the error. */
export function refuse(req: DataPlaneRequest, options: InferOptions, sources: RefusalSources): Promise<InferenceAnswer> {
  const err = refusalOf(req, sources);
  RequestTrace.request({ model: req.model, version: req.version || MODEL_VERSION, id: req.id }, options.trace, options.protocol, options.admitted)?.end(err);
  return Promise.reject(err);
}

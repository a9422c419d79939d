/**
 * Stowage's control service (proto/control.proto): the seam a large deployment's own control plane
 * integrates against: each model's state, residency and learned costs; its scheduling policy and
 * residency changed at run time; the weight arenas compacted on demand. Plain functions of the
 * request, on the main thread (shared/operations.ts); the gRPC table is protocol/grpc-services.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { Devices } from './devices.js';
import type { Residency } from '../shared/channels/device.js';
import { RESIDENCIES } from '../shared/config-schema.js';
import { errors, quote } from '../shared/errors.js';
import type { ModelRegistry } from './model-registry.js';
import type { Statistics } from './statistics.js';
import type { WeightTraffic } from './metrics.js';
import { LoadWindows, type ModelReading, type WindowReport } from './load-windows.js';
import { StatusSnapshot } from './status-snapshot.js';
import { fullBatchRate } from '../actors/device/execution-costs.js';
import { ReportVersions } from './report-versions.js';

type DeviceStatus = Awaited<ReturnType<Devices['status']>>[number];
interface StatusRequest { name: string; window_seconds: number; fresh?: boolean; active_only?: boolean; versioned?: boolean; since_version?: string | number }

/** The longest window a ModelControlStatus may ask for: an hour. */
const MAX_WINDOW_SECONDS = 3600;

export interface ControlContext {
  registry: ModelRegistry;
  devices: Devices;
  statistics: Statistics;
  /** A model's weight-cache hits and misses so far (metrics.ts). */
  weightTraffic: (model: string) => WeightTraffic;
  /** The node's weight budget, summed over its devices (0: the weight cache off). */
  weightBudgetBytes: number;
  /** runtime.session_budget_bytes summed over its devices (0: none). */
  sessionBudgetBytes: number;
  /** The node's stable name (node-name.ts; known once the gRPC port is) and when its process started. */
  nodeName: () => string;
  startedMs: number;
  logger: Logger;
}

/**
 * Fault injection, for the test of slow status reads (test/integration/fleet-health.test.js): while
 * the file STOWAGE_FAULT_STATUS_DELAY_FILE names exists, every ModelControlStatus answer first
 * waits the milliseconds it holds, as a node whose status path is congested. A file, so that a
 * test turns it on and off while the node runs.
 */
const statusDelayFile = process.env.STOWAGE_FAULT_STATUS_DELAY_FILE;
function injectedStatusDelayMs(): number {
  if (!statusDelayFile || !existsSync(statusDelayFile)) return 0;
  try {
    return Number(readFileSync(statusDelayFile, 'utf8')) || 0;
  } catch {
    return 0; // removed meanwhile
  }
}


export function controlOperations(ctx: ControlContext) {
  const { registry, devices, logger } = ctx;
  const windows = new LoadWindows();
  const snapshot = new StatusSnapshot(() => devices.status());
  const versions = new VersionedReports(ctx.startedMs);
  return {
    ModelControlStatus: async (req: StatusRequest) => {
      const delayMs = statusDelayFile ? injectedStatusDelayMs() : 0;
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
      return modelControlStatus(ctx, { windows, snapshot, versions }, req);
    },
    SetModelPolicy: async (req: { name: string; weight: number; max_batch_size: number }) => {
      registry.find(req.name);
      if (!(req.weight >= 0) || !Number.isFinite(req.weight)) throw errors.invalidRequest(`weight must be > 0 (or 0 to leave it), got ${req.weight}`);
      const update = {
        ...(req.weight > 0 ? { weight: req.weight } : {}),
        ...(req.max_batch_size > 0 ? { maxBatchSize: req.max_batch_size } : {}),
      };
      await devices.setPolicy(req.name, update);
      logger.info({ model: req.name, ...update }, 'model policy changed');
      return {};
    },
    SetModelResidency: async (req: { name: string; residency: string }) => {
      const record = registry.find(req.name);
      if (!(RESIDENCIES as readonly string[]).includes(req.residency)) throw errors.invalidRequest(`residency must be one of ${RESIDENCIES.join(', ')}, got ${quote(req.residency)}`);
      if (record.spec?.kind === 'meta') throw errors.invalidRequest(`model ${quote(req.name)} is a meta model: it has no weights of its own`);
      await devices.setResidency(req.name, req.residency as Residency);
      logger.info({ model: req.name, residency: req.residency }, 'model residency changed');
      return {};
    },
    PrefetchModel: async (req: { name: string }) => {
      const record = registry.find(req.name);
      if (record.spec?.kind === 'meta') throw errors.invalidRequest(`model ${quote(req.name)} is a meta model: it has no weights of its own`);
      if (!record.instance || record.state !== 'READY') throw errors.modelNotReady(req.name, record.state, record.reason);
      await devices.prefetch(req.name, record.instance);
      const instance = record.instance;
      const residentBytes = (await devices.status()).filter((s) => s.instance === instance && s.resident).reduce((sum, s) => sum + s.weightBytes, 0);
      logger.debug({ model: req.name, residentBytes }, 'model prefetched');
      return { resident_bytes: residentBytes };
    },
    CompactMemory: async (req: { device: number }) => {
      if (req.device >= 0 && !devices.handles.some((d) => d.deviceId === req.device)) {
        throw errors.invalidRequest(`no device ${req.device}; devices: ${devices.handles.map((d) => d.deviceId).join(', ')} (or -1 for all)`);
      }
      const movedBytes = await devices.compact(req.device);
      logger.info({ device: req.device, movedBytes }, 'weight arena compacted');
      return { moved_bytes: movedBytes };
    },
  };
}

/**
 * Every model asked for (all for an empty name): its state, residency, queue, costs and policy,
 * what a pooled gateway places it by, and the node's own figures. The devices' part comes from
 * the status snapshot (status-snapshot.ts; `fresh`: read after the call), never waiting on a busy
 * device; the rest is the main thread's own. Every device holds every model:
 * queues add up; costs, policy, residency and CUDA graphs are the first device's; resident bytes
 * add up over the devices where the weights are on now, sessions' GPU memory over every device.
 */
async function modelControlStatus(ctx: ControlContext, state: StatusState, req: StatusRequest) {
  const { registry, devices, statistics } = ctx;
  if (!(req.window_seconds >= 0 && req.window_seconds <= MAX_WINDOW_SECONDS)) {
    throw errors.invalidRequest(`window_seconds must be between 0 (none) and ${MAX_WINDOW_SECONDS}, got ${req.window_seconds}`);
  }
  const all = registry.all();
  const records = req.name === '' ? all : [registry.find(req.name)];
  const { value: reports, ageMs } = await state.snapshot.get(req.fresh === true);
  const instances = new Map<string, Instance>();
  for (const s of reports) {
    const resident = s.resident ? s.weightBytes : 0;
    const seen = instances.get(s.instance);
    if (seen) {
      seen.queuedAll += s.queued;
      seen.refusedAll += s.refusedRows;
      seen.residentAll += resident;
      seen.sessionAll += s.sessionDeviceBytes ?? 0;
      seen.sessionBytesAll += s.sessionBytes;
      seen.sessions.push(`device ${s.device}: ${s.session}`);
      if (s.resident) seen.onDevices.push(s.device);
    } else instances.set(s.instance, { ...s, queuedAll: s.queued, refusedAll: s.refusedRows, residentAll: resident, sessionAll: s.sessionDeviceBytes ?? 0, sessionBytesAll: s.sessionBytes, sessions: [`device ${s.device}: ${s.session}`], onDevices: s.resident ? [s.device] : [] });
  }
  // Every model's counters go into a window, whichever model was asked for.
  const nowMs = Date.now();
  const window = req.window_seconds > 0 ? state.windows.read(req.window_seconds, nowMs, () => readings(all, instances, statistics, ctx.weightTraffic)) : undefined;
  // active_only: what placement weighs, the models with load or weights on a device; the rest are the index's.
  const active = (r: (typeof records)[number]) => {
    const s = r.instance ? instances.get(r.instance) : undefined;
    const w = window?.get(r.name);
    return (s?.residentAll ?? 0) > 0 || (s?.queuedAll ?? 0) > 0 || (w !== undefined && (w.load > 0 || w.residentBytes > 0));
  };
  const row = (r: (typeof records)[number]) => statusRow(ctx, r, r.instance ? instances.get(r.instance) : undefined, window);
  const node = {
    weight_budget_bytes: ctx.weightBudgetBytes,
    session_budget_bytes: ctx.sessionBudgetBytes,
    devices: devices.handles.filter((d) => d.serving).length,
    queue_depth: reports.reduce((sum, s) => sum + s.queued, 0),
    snapshot_age_seconds: ageMs / 1000,
    node_name: ctx.nodeName(),
    started_unix_ms: ctx.startedMs,
    repository_digest: repositoryDigest(all),
    // The window read ends at the last boundary of its length (load-windows.ts: wall-clock windows).
    window_end_unix_ms: window ? Math.floor(nowMs / (req.window_seconds * 1000)) * req.window_seconds * 1000 : 0,
  };
  if (req.versioned && req.active_only && window && req.name === '') {
    // The rows as published for this window (the first versioned read in it publishes them).
    const versions = state.versions.of(req.window_seconds, window, () => new Map(records.filter(active).map((r) => [r.name, row(r)])));
    const answer = versions.answer(Number(req.since_version ?? 0) || 0);
    return { ...node, models: answer.rows, report_version: answer.version, changes_only: answer.changesOnly, gone: answer.gone };
  }
  return { ...node, models: (req.active_only ? records.filter(active) : records).map(row), report_version: 0, changes_only: false, gone: [] };
}

/** A model's devices' figures summed (Devices.status, one entry per device holding it). */
type Instance = DeviceStatus & { queuedAll: number; refusedAll: number; residentAll: number; sessionAll: number; sessionBytesAll: number; sessions: string[]; onDevices: number[] };

/** What ModelControlStatus keeps between calls: the load windows, the devices' snapshot, the versioned reports. */
interface StatusState {
  windows: LoadWindows;
  snapshot: StatusSnapshot<DeviceStatus[]>;
  versions: VersionedReports;
}

type StatusRow = ReturnType<typeof statusRow>;

/** One model's ModelControlStatus: `s` its devices' figures (none: loaded on none), `window` the last window's. */
function statusRow(ctx: ControlContext, r: { name: string; state: string; reason: string; instance?: string | null; spec?: { kind?: string } | null }, s: Instance | undefined, window: ReadonlyMap<string, WindowReport> | undefined) {
  const { devices, statistics } = ctx;
  const traffic = ctx.weightTraffic(r.name);
  const w = window?.get(r.name);
  return {
    name: r.name,
    state: r.state,
    reason: r.reason,
    instance: r.instance ?? '',
    residency: s?.residency ?? '',
    resident_bytes: s?.residentAll ?? 0,
    // The device holding its weights now; -1 when none does, or several do.
    device: s?.onDevices.length === 1 ? s.onDevices[0] : -1,
    queue_depth: s?.queuedAll ?? 0,
    learned_cost: (s?.costs ?? []).map((c) => ({ batch_size: c.batchSize, ms: c.ms })),
    weight: s?.weight ?? devices.policies.of(devices.handles[0].deviceId, r.name).weight,
    max_batch_size: s ? (Number.isFinite(s.maxBatchRows) ? s.maxBatchRows : 0) : 0,
    placed_devices: r.spec?.kind === 'meta' ? [] : devices.placementOf(r.name),
    session_device_bytes: s?.sessionAll ?? 0,
    cuda_graphs: s?.cudaGraphs ?? '',
    weight_bytes: s?.weightBytes ?? 0,
    compute_seconds: statistics.computeSeconds(r.name),
    weight_hits: traffic.hits,
    weight_misses: traffic.misses,
    window_load: w?.load ?? 0,
    window_resident_bytes: w?.residentBytes ?? 0,
    window_rate: w?.rate ?? 0,
    window_capacity: w?.capacity ?? 0,
    window_weight_load: w?.weightLoad ?? 0,
    // One device: its words as they are; several: each device's.
    session: s ? (s.sessions.length === 1 ? s.session : s.sessions.join('; ')) : '',
    session_bytes: s?.sessionBytesAll ?? 0,
  };
}

/** A row's figures a pooled gateway reads (remote/status-report.ts): a versioned row changes when these do. */
function placementKey(row: StatusRow): string {
  return `${row.state}|${row.weight_bytes}|${row.resident_bytes}|${row.window_load}|${row.window_resident_bytes}|${row.window_rate}|${row.window_capacity}|${row.window_weight_load}|${row.session_bytes}|${row.weight_hits}|${row.weight_misses}`;
}

/**
 * The versioned reports, one per window length asked for (gateways of one fleet ask one): each
 * published once per window, from the first versioned read in it.
 */
class VersionedReports {
  readonly #firstVersion: number;
  readonly #byLength = new Map<number, { window: ReadonlyMap<string, WindowReport>; versions: ReportVersions<StatusRow> }>();

  constructor(firstVersion: number) {
    this.#firstVersion = firstVersion;
  }

  of(windowSeconds: number, window: ReadonlyMap<string, WindowReport>, rows: () => ReadonlyMap<string, StatusRow>): ReportVersions<StatusRow> {
    let kept = this.#byLength.get(windowSeconds);
    if (!kept) {
      // As many lengths as LoadWindows keeps; the least recently published goes.
      if (this.#byLength.size >= MAX_VERSIONED_LENGTHS) this.#byLength.delete(this.#byLength.keys().next().value!);
      kept = { window, versions: new ReportVersions<StatusRow>(this.#firstVersion) };
      kept.versions.publish(rows(), placementKey);
    } else if (kept.window !== window) {
      kept.window = window;
      kept.versions.publish(rows(), placementKey);
    }
    this.#byLength.delete(windowSeconds);
    this.#byLength.set(windowSeconds, kept);
    return kept.versions;
  }
}

/** Window lengths with a versioned report kept at once (LoadWindows keeps as many windows). */
const MAX_VERSIONED_LENGTHS = 4;

/** Every model's counters now, for a window (load-windows.ts): `instances` are its devices' figures summed. */
function readings(
  records: readonly { name: string; instance?: string | null }[],
  instances: ReadonlyMap<string, { residentAll: number; queuedAll: number; refusedAll: number; costs: { batchSize: number; ms: number }[]; maxBatchRows: number }>,
  statistics: Statistics,
  weightTraffic: (model: string) => WeightTraffic,
): Map<string, ModelReading> {
  return new Map(records.map((r) => {
    const s = r.instance ? instances.get(r.instance) : undefined;
    return [r.name, {
      computeSeconds: statistics.computeSeconds(r.name),
      residentBytes: s?.residentAll ?? 0,
      rows: statistics.rowsExecuted(r.name),
      queued: s?.queuedAll ?? 0,
      refused: s?.refusedAll ?? 0,
      // Rows a second one device answers of it at full batches: its learned costs taken to its largest batch.
      capacity: s ? fullBatchRate(s.costs, s.maxBatchRows) : 0,
      weightLoadSeconds: weightTraffic(r.name).loadSeconds,
    }];
  }));
}

/**
 * FNV-1a over every model's name and state, two 32-bit lanes: what a pooled gateway compares to
 * know whether the node's RepositoryIndex changed since it last read it (a cheap string, not the
 * 10,000 entries). The registry lists models sorted by name, so one set gives one digest.
 */
function repositoryDigest(records: readonly { name: string; state: string }[]): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ records.length;
  for (const r of records) {
    const text = `${r.name}\u0000${r.state}\u0001`;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
    }
  }
  return `${(a >>> 0).toString(16).padStart(8, '0')}${(b >>> 0).toString(16).padStart(8, '0')}`;
}

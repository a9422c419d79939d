/**
 * What a request must fit before it runs, counted for the whole process: the edges' caps on the
 * requests in flight (`Admission`), and the quotas of tenants and models (`Quotas`).
 *
 * Admission sheds load at the edges on what costs memory: the bytes of the inference requests in
 * flight (`endpoints.max_inflight_bytes`, default 1 GiB), and optionally their count
 * (`endpoints.max_concurrent_requests`, default 0: uncapped). A burst of a thousand small requests
 * from one client queues and is answered, as Triton's clients expect; a burst whose tensors would
 * hold more memory than the cap is refused RESOURCE_EXHAUSTED at once, naming the bytes. A request
 * alone is always admitted (the message limits bound its size), so a cap below the largest
 * message never refuses everything. Per model, the device's queue depth bounds waiting requests
 * (scheduler.max_queue_depth). Health and metadata RPCs are never shed, so probes keep working.
 *
 * Quotas (the node file's `global.quotas`): per tenant and per model, limits on the requests in
 * flight and on device-seconds per second, for this node, whichever thread holds the request. So
 * that one noisy client of a model does not take that model, nor one model the node.
 *
 * - A request's tenant is what its `endpoints.tenant_key` metadata (gRPC) or header (REST) says:
 *   absent, tenant `default`; a tenant the file names is a subject of its own; every other tenant
 *   counts as `other`, together (so metrics' labels stay a bounded set, and `other`'s limits, if
 *   the file sets them, hold for all of them together).
 * - In flight: a request off the wire takes a place with its tenant and with its model (where
 *   those have a limit) at admission, once its model is known, and gives it back when answered; a
 *   meta model's sub-calls ride on their parent's place.
 * - Device-seconds per second: every execution's share of device time (its compute time × the
 *   request's rows ÷ the batch's rows) is charged to its tenant and its model, sub-calls included;
 *   a request let through is charged its predicted run at once (`prepay`), settled by its run's
 *   charge or given back if it never runs, so that the requests waiting for the device count too;
 *   a subject that ran ahead of its rate by more than `burst_seconds` of its rate is refused
 *   until time catches up. The charge is a generic cell rate algorithm (GCRA): each subject keeps one
 *   number, its theoretical arrival time, moved forward by charge ÷ rate with a compare-and-swap,
 *   so that every thread updates it in place.
 * - Over a limit: RESOURCE_EXHAUSTED at once (STOWAGE_QUOTA_EXCEEDED), naming the subject and the
 *   limit; nothing of the request runs, and every other subject is unaffected.
 *
 * One count for the whole process, for both: the numbers live in a SharedArrayBuffer that every
 * edge (the gRPC and REST edges of the main thread, or of each edge thread: actors/edge/) updates
 * with atomic operations, so the caps hold for all of them together. Two edges admitting at once
 * may both refuse where one of them alone would have passed; none ever admits past a cap. Each
 * edge also counts its own share in a row of its own, so that when an edge thread dies with
 * requests in flight its share is given back (`forget`) instead of holding the caps for ever.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import { type ExecutionTiming } from './channels/inference.js';
import { nowMs } from './timers.js';
import { DURATION_BUCKETS_MS, durationBucket, type CountedSeries } from './request-counters.js';
import { errors, type StowageError } from './errors.js';

/**
 * The counters in the shared memory: the process's, then each edge's own share (INFLIGHT and BYTES from EDGE_BASE + 2 ×
 * slot).
 */
const INFLIGHT = 0;
const BYTES = 1;
const SHED = 2;
const EDGE_BASE = 3;
/** Edges that may count: the main thread (slot 0) and up to 64 edge threads. */
export const ADMISSION_SLOTS = 65;

export class Admission {
  readonly #cap: number;
  readonly #maxBytes: number;
  readonly #counters: BigInt64Array;
  /** This edge's own share: its slot's INFLIGHT, and BYTES after it. */
  readonly #own: number;

  /**
   * `cap` and `maxBytes` 0 mean uncapped. `memory`: the counters another thread made
   * (`admission.memory`), to count with it; none: counters of its own. `slot`: the edge's own
   * share's slot (0: the main thread; edge thread k: k + 1).
   */
  constructor(cap: number, maxBytes: number, memory?: SharedArrayBuffer, slot = 0) {
    this.#cap = cap;
    this.#maxBytes = maxBytes;
    this.#counters = new BigInt64Array(memory ?? new SharedArrayBuffer((EDGE_BASE + 2 * ADMISSION_SLOTS) * BigInt64Array.BYTES_PER_ELEMENT));
    this.#own = EDGE_BASE + 2 * slot;
  }

  /** The shared counters, for another thread's Admission (the same caps) to count with. */
  get memory(): SharedArrayBuffer {
    return this.#counters.buffer as SharedArrayBuffer;
  }

  get inflight(): number {
    return Number(Atomics.load(this.#counters, INFLIGHT));
  }

  /** Bytes of the requests in flight (their tensors' bytes as received). */
  get inflightBytes(): number {
    return Number(Atomics.load(this.#counters, BYTES));
  }

  /** Requests refused so far, by every edge. */
  get shed(): number {
    return Number(Atomics.load(this.#counters, SHED));
  }

  #refuse(err: Error): never {
    Atomics.add(this.#counters, SHED, 1n);
    throw err;
  }

  /** Add `requests` and `bytes` to the process's counts and this edge's share. */
  #count(requests: bigint, bytes: bigint): void {
    const c = this.#counters;
    Atomics.add(c, INFLIGHT, requests);
    Atomics.add(c, BYTES, bytes);
    Atomics.add(c, this.#own, requests);
    Atomics.add(c, this.#own + 1, bytes);
  }

  /**
   * Take a place for a request of `bytes` or throw STOWAGE_SERVER_BUSY; every enter() needs one leave() with the same
   * bytes.
   */
  enter(bytes = 0): void {
    const c = this.#counters;
    const before = Number(Atomics.add(c, INFLIGHT, 1n));
    if (this.#cap > 0 && before >= this.#cap) {
      Atomics.sub(c, INFLIGHT, 1n);
      this.#refuse(errors.serverBusy(this.#cap));
    }
    // A request is alone, and passes whatever its size, when no bytes were held as it added its own:
    // judged from the bytes word itself. Judged from the requests word (`before`), a first request
    // whose bytes came after three others had been admitted beside it (each seeing the bytes before
    // its own) passed as alone too, taking the process past the cap (1,200 of 1,000 bytes, seen on
    // four threads).
    const held = Number(Atomics.add(c, BYTES, BigInt(bytes)));
    if (this.#maxBytes > 0 && held > 0 && held + bytes > this.#maxBytes) {
      Atomics.sub(c, BYTES, BigInt(bytes));
      Atomics.sub(c, INFLIGHT, 1n);
      this.#refuse(errors.serverBusyBytes(this.#maxBytes, held, bytes));
    }
    Atomics.add(c, this.#own, 1n);
    Atomics.add(c, this.#own + 1, BigInt(bytes));
  }

  /**
   * A request already admitted brings `bytes` more (a REST body arriving in chunks, counted as it
   * comes rather than after it is whole); throws STOWAGE_SERVER_BUSY, leaving the count as it
   * was, when that takes the bytes in flight past the cap and other requests are in flight. Its
   * leave() gives back every byte it was admitted and grew by.
   */
  grow(bytes: number): void {
    const c = this.#counters;
    const held = Number(Atomics.add(c, BYTES, BigInt(bytes)));
    if (this.#maxBytes > 0 && this.inflight > 1 && held + bytes > this.#maxBytes) {
      Atomics.sub(c, BYTES, BigInt(bytes));
      this.#refuse(errors.serverBusyBytes(this.#maxBytes, held, bytes));
    }
    Atomics.add(c, this.#own + 1, BigInt(bytes));
  }

  leave(bytes = 0): void {
    this.#count(-1n, -BigInt(bytes));
  }

  /**
   * Edge `slot` is gone (its thread died with requests in flight, whose leave() will never come):
   * give its share back to the process's counts.
   */
  forget(slot: number): void {
    const c = this.#counters;
    const at = EDGE_BASE + 2 * slot;
    const requests = Atomics.exchange(c, at, 0n);
    const bytes = Atomics.exchange(c, at + 1, 0n);
    Atomics.sub(c, INFLIGHT, requests);
    Atomics.sub(c, BYTES, bytes);
  }
}

/** The admission's metrics, registered once per process by whoever made its counters. */
export function admissionMetrics(admission: Admission, registry: Registry): void {
  let counted = 0;
  new Counter({
    name: 'stowage_grpc_shed_total', help: 'Inference requests refused because the requests in flight held endpoints.max_inflight_bytes (or numbered endpoints.max_concurrent_requests)', registers: [registry],
    collect() {
      const shed = admission.shed;
      this.inc(shed - counted);
      counted = shed;
    },
  });
  new Gauge({
    name: 'stowage_grpc_inflight_requests', help: 'Inference requests in flight (ModelInfer calls, open streams, REST inferences)', registers: [registry],
    collect() {
      this.set(admission.inflight);
    },
  });
  new Gauge({
    name: 'stowage_grpc_inflight_bytes', help: 'Bytes of tensors the inference requests in flight hold (what endpoints.max_inflight_bytes caps)', registers: [registry],
    collect() {
      this.set(admission.inflightBytes);
    },
  });
}

/** A subject's limits (quotas.tenants.<name>, quotas.models.<name>); 0: none. */
export interface QuotaLimits {
  max_inflight: number;
  device_seconds_per_second: number;
  burst_seconds: number;
}

/** What every thread needs to count with the others: the shared numbers and who they are for. */
export interface QuotasShape {
  memory: SharedArrayBuffer;
  /** Subjects in order: `tenant:<name>` and `model:<name>`, each with its limits. */
  subjects: { kind: 'tenant' | 'model'; name: string; limits: QuotaLimits }[];
  /** Threads that may count (the main thread's row, 0, and each edge's, 1 up). */
  rows: number;
  /**
   * The tenants' answered requests by their whole time (stowage_tenant_request_duration_seconds): per row, per
   * tenant label (`tenantLabels`), a word per duration bucket (DURATION_BUCKETS_MS), then the count and the ns.
   */
  durations: SharedArrayBuffer;
  /** The tenants requests are counted under: the node file's, then `default` and `other` (a bounded set of labels). */
  tenantLabels: string[];
}

/** A request's places (subjects' indexes), and whether it holds in-flight places there or only charges them. */
export interface QuotaTicket {
  readonly subjects: readonly number[];
  readonly holds: boolean;
  /** Whether a subject of it has a device-time rate (`prepay` has something to charge ahead to). */
  readonly rated?: boolean;
  /**
   * Device time charged ahead when it was let through (ns: its predicted run, `prepay`), not yet
   * settled by its execution's charge; given back if it never runs. On the thread that admitted it.
   */
  prepaidNs?: number;
}

/** One subject's numbers as metrics read them. */
export interface QuotaReading {
  kind: 'tenant' | 'model';
  name: string;
  inflight: number;
  deviceSeconds: number;
  refused: { inflight: number; rate: number };
}

// Per subject, STRIDE words: its place count, its theoretical arrival time (ns on nowMs's clock),
// refusals by limit, and device time charged (ns). Then per row and subject, that row's places.
const PLACES = 0;
const TAT = 1;
const REFUSED_INFLIGHT = 2;
const REFUSED_RATE = 3;
const DEVICE_NS = 4;
const STRIDE = 5;
// Per row and tenant label, in `durations`: the buckets, then COUNT and SUM_NS.
const COUNT = DURATION_BUCKETS_MS.length;
const SUM_NS = COUNT + 1;
const TENANT_STRIDE = SUM_NS + 1;

/** The tenant of a request that names none. */
export const DEFAULT_TENANT = 'default';
/** Every tenant the node file does not name, counted together. */
export const OTHER_TENANT = 'other';

const nowNs = (): bigint => BigInt(Math.round(nowMs() * 1e6));

export class Quotas {
  readonly #shape: QuotasShape;
  readonly #words: BigInt64Array;
  /** This thread's row of places. */
  readonly #row: number;
  readonly #tenants = new Map<string, number>();
  readonly #models = new Map<string, number>();
  readonly #durations: BigInt64Array;
  /** Each tenant label's index in `durations`. */
  readonly #labels: Map<string, number>;

  /** `row`: this thread's row (the main thread's 0; edge thread k's k + 1). */
  constructor(shape: QuotasShape, row: number) {
    this.#shape = shape;
    this.#words = new BigInt64Array(shape.memory);
    this.#row = row;
    shape.subjects.forEach(({ kind, name }, i) => (kind === 'tenant' ? this.#tenants : this.#models).set(name, i));
    this.#durations = new BigInt64Array(shape.durations);
    this.#labels = new Map(shape.tenantLabels.map((name, i) => [name, i]));
  }

  /** The shared numbers for `tenants` and `models` (the node file's), counted by `rows` threads. */
  static create(tenants: Readonly<Record<string, QuotaLimits>>, models: Readonly<Record<string, QuotaLimits>>, rows: number): QuotasShape {
    const subjects = [
      ...Object.entries(tenants).map(([name, limits]) => ({ kind: 'tenant' as const, name, limits })),
      ...Object.entries(models).map(([name, limits]) => ({ kind: 'model' as const, name, limits })),
    ];
    const words = subjects.length * (STRIDE + rows);
    const tenantLabels = [...new Set([...Object.keys(tenants), DEFAULT_TENANT, OTHER_TENANT])];
    const durations = new SharedArrayBuffer(rows * tenantLabels.length * TENANT_STRIDE * BigInt64Array.BYTES_PER_ELEMENT);
    return { memory: new SharedArrayBuffer(Math.max(1, words) * BigInt64Array.BYTES_PER_ELEMENT), subjects, rows, durations, tenantLabels };
  }

  get shape(): QuotasShape {
    return this.#shape;
  }

  /** The tenant a request's key names, as quotas and metrics count it: the name, `default` or `other`. */
  tenantOf(key: string | undefined): string {
    if (key === undefined || key === '') return DEFAULT_TENANT;
    return this.#tenants.has(key) ? key : OTHER_TENANT;
  }

  /**
   * A place for a request off the wire of `tenant` (as `tenantOf` says it) to `model`, or
   * STOWAGE_QUOTA_EXCEEDED naming the limit; null when neither has a quota. Give it back with `leave`.
   */
  admit(model: string, tenant: string): QuotaTicket | null {
    const subjects = this.#subjectsOf(model, tenant);
    if (subjects.length === 0) return null;
    const now = nowNs();
    const words = this.#words;
    let rated = false;
    for (const i of subjects) {
      const { limits } = this.#shape.subjects[i];
      if (limits.device_seconds_per_second <= 0) continue;
      rated = true;
      const ahead = Atomics.load(words, i * STRIDE + TAT) - now;
      if (ahead > BigInt(Math.round(limits.burst_seconds * 1e9))) {
        Atomics.add(words, i * STRIDE + REFUSED_RATE, 1n);
        throw errors.quotaExceeded(this.#describe(i), `${limits.device_seconds_per_second} device-seconds per second (burst ${limits.burst_seconds} s), and it is ${(Number(ahead) / 1e9).toFixed(2)} s ahead of that rate`, `${this.#path(i)}.device_seconds_per_second`);
      }
    }
    const taken: number[] = [];
    for (const i of subjects) {
      const { limits } = this.#shape.subjects[i];
      const before = Number(Atomics.add(words, i * STRIDE + PLACES, 1n));
      taken.push(i);
      if (limits.max_inflight > 0 && before >= limits.max_inflight) {
        for (const j of taken) Atomics.sub(words, j * STRIDE + PLACES, 1n);
        Atomics.add(words, i * STRIDE + REFUSED_INFLIGHT, 1n);
        throw errors.quotaExceeded(this.#describe(i), `${limits.max_inflight} requests in flight`, `${this.#path(i)}.max_inflight`);
      }
    }
    for (const i of subjects) Atomics.add(words, this.#share(this.#row, i), 1n);
    return { subjects, holds: true, rated, prepaidNs: 0 };
  }

  /**
   * The refusal of a request whose tenant key is `key` if its tenant is over a limit now, before its
   * model is known (the edge asks while only the call's metadata has arrived, so a flood over its
   * quota costs no message read); null when under, or when the tenant has no quota. Takes no place:
   * a request let through takes its places at `admit`, which refuses it there if others came first.
   */
  tenantRefusal(key: string | undefined): StowageError | null {
    const i = this.#tenants.get(this.tenantOf(key));
    if (i === undefined) return null;
    const { limits } = this.#shape.subjects[i];
    const words = this.#words;
    if (limits.device_seconds_per_second > 0) {
      const ahead = Atomics.load(words, i * STRIDE + TAT) - nowNs();
      if (ahead > BigInt(Math.round(limits.burst_seconds * 1e9))) {
        Atomics.add(words, i * STRIDE + REFUSED_RATE, 1n);
        return errors.quotaExceeded(this.#describe(i), `${limits.device_seconds_per_second} device-seconds per second (burst ${limits.burst_seconds} s), and it is ${(Number(ahead) / 1e9).toFixed(2)} s ahead of that rate`, `${this.#path(i)}.device_seconds_per_second`);
      }
    }
    if (limits.max_inflight > 0 && Number(Atomics.load(words, i * STRIDE + PLACES)) >= limits.max_inflight) {
      Atomics.add(words, i * STRIDE + REFUSED_INFLIGHT, 1n);
      return errors.quotaExceeded(this.#describe(i), `${limits.max_inflight} requests in flight`, `${this.#path(i)}.max_inflight`);
    }
    return null;
  }

  /**
   * What the edges ask of a call before its request is read (`tenantRefusal`), when any tenant has a
   * quota; undefined when none has (it would never refuse, and the edges install nothing).
   */
  get earlyRefusal(): ((tenantKey: string | undefined) => StowageError | null) | undefined {
    return this.#tenants.size > 0 ? (key) => this.tenantRefusal(key) : undefined;
  }

  /** What a meta model's sub-call to `model` charges: its parent's subjects, and its own model's; it holds no place. */
  subCall(parent: QuotaTicket | null, model: string): QuotaTicket | null {
    const own = this.#models.get(model);
    const subjects = [...(parent?.subjects ?? []).filter((i) => this.#shape.subjects[i].kind === 'tenant'), ...(own === undefined ? [] : [own])];
    return subjects.length ? { subjects, holds: false } : null;
  }

  /**
   * Charge `predictedMs` of device time (the request's run as this thread learned it) ahead, as the
   * request is let through: charged only after their runs, the requests of a flood admitted before
   * the first charges came in were not counted, and piled up on the device ahead of everyone
   * else's. Its execution's charge settles it (`charge`); `leave` gives back what no run settled.
   */
  prepay(ticket: QuotaTicket | null, predictedMs: number | undefined): void {
    if (!ticket?.holds || !ticket.rated || !(predictedMs !== undefined && predictedMs > 0)) return;
    const ns = predictedMs * 1e6;
    this.#advance(ticket, ns);
    ticket.prepaidNs = (ticket.prepaidNs ?? 0) + ns;
  }

  /** Charge one execution's share of device time (the request's `rows` of the batch's) to the ticket's subjects. */
  charge(ticket: QuotaTicket | null, timing: ExecutionTiming, rows: number): void {
    if (!ticket) return;
    const total = timing.computeInputNs + timing.computeInferNs + timing.computeOutputNs;
    const share = timing.batchRows > 0 ? (total * Math.min(rows, timing.batchRows)) / timing.batchRows : total / Math.max(1, timing.requests);
    if (!(share > 0)) return;
    for (const i of ticket.subjects) Atomics.add(this.#words, i * STRIDE + DEVICE_NS, BigInt(Math.round(share)));
    // What was charged ahead is settled by the run: only the difference moves the rate on (or back).
    const prepaid = ticket.prepaidNs ?? 0;
    if (prepaid) ticket.prepaidNs = 0;
    this.#advance(ticket, share - prepaid);
  }

  /**
   * GCRA: each rate-limited subject's theoretical arrival time moves on by `ns` of device time at
   * its rate, from now at the earliest; back by it when `ns` is negative (a charge ahead given back,
   * or settled by a shorter run).
   */
  #advance(ticket: QuotaTicket, ns: number): void {
    if (ns === 0) return;
    const words = this.#words;
    const now = nowNs();
    for (const i of ticket.subjects) {
      const rate = this.#shape.subjects[i].limits.device_seconds_per_second;
      if (rate <= 0) continue;
      const step = BigInt(Math.round(ns / rate));
      for (;;) {
        const tat = Atomics.load(words, i * STRIDE + TAT);
        const next = ns > 0 ? (tat > now ? tat : now) + step : tat + step;
        if (Atomics.compareExchange(words, i * STRIDE + TAT, tat, next) === tat) break;
      }
    }
  }

  /** The request is answered (or refused, or failed): its places go back, and its charge ahead that no run settled. */
  leave(ticket: QuotaTicket | null): void {
    if (!ticket?.holds) return;
    if (ticket.prepaidNs) {
      this.#advance(ticket, -ticket.prepaidNs);
      ticket.prepaidNs = 0;
    }
    for (const i of ticket.subjects) {
      Atomics.sub(this.#words, i * STRIDE + PLACES, 1n);
      Atomics.sub(this.#words, this.#share(this.#row, i), 1n);
    }
  }

  /**
   * A request of `tenant` (as `tenantOf` names it) answered after `durationNs`, counted in this thread's row: so
   * that an operator sees each tenant's latency, the one a quota on another tenant is there to keep. Whether a
   * tenant has a quota or not; a name outside the labels counts as `other`.
   */
  answered(tenant: string, durationNs: number): void {
    const label = this.#labels.get(tenant) ?? this.#labels.get(OTHER_TENANT)!;
    const at = (this.#row * this.#shape.tenantLabels.length + label) * TENANT_STRIDE;
    const words = this.#durations;
    const bucket = durationBucket(durationNs);
    if (bucket >= 0) Atomics.add(words, at + bucket, 1n);
    Atomics.add(words, at + SUM_NS, BigInt(Math.max(0, Math.round(durationNs))));
    Atomics.add(words, at + COUNT, 1n); // last: a reader that sees the count sees its bucket
  }

  /** Every tenant label's answered requests now, summed over the threads, each labelled with its tenant. */
  durations(): CountedSeries[] {
    const words = this.#durations;
    const { rows, tenantLabels } = this.#shape;
    return tenantLabels.map((tenant, label) => {
      const sum = (field: number) => {
        let n = 0n;
        for (let row = 0; row < rows; row++) n += Atomics.load(words, (row * tenantLabels.length + label) * TENANT_STRIDE + field);
        return Number(n);
      };
      return { label: tenant, buckets: DURATION_BUCKETS_MS.map((_, b) => sum(b)), count: sum(COUNT), seconds: sum(SUM_NS) / 1e9 };
    });
  }

  /** Thread `row` is gone (an edge thread died with requests in flight): its places go back. */
  forget(row: number): void {
    for (let i = 0; i < this.#shape.subjects.length; i++) {
      const places = Atomics.exchange(this.#words, this.#share(row, i), 0n);
      Atomics.sub(this.#words, i * STRIDE + PLACES, places);
    }
  }

  /** Every subject's numbers now. */
  read(): QuotaReading[] {
    const words = this.#words;
    return this.#shape.subjects.map(({ kind, name }, i) => ({
      kind, name,
      inflight: Number(Atomics.load(words, i * STRIDE + PLACES)),
      deviceSeconds: Number(Atomics.load(words, i * STRIDE + DEVICE_NS)) / 1e9,
      refused: { inflight: Number(Atomics.load(words, i * STRIDE + REFUSED_INFLIGHT)), rate: Number(Atomics.load(words, i * STRIDE + REFUSED_RATE)) },
    }));
  }

  #subjectsOf(model: string, tenant: string): number[] {
    const t = this.#tenants.get(tenant);
    const m = this.#models.get(model);
    return t === undefined ? (m === undefined ? [] : [m]) : m === undefined ? [t] : [t, m];
  }

  #share(row: number, subject: number): number {
    return this.#shape.subjects.length * STRIDE + row * this.#shape.subjects.length + subject;
  }

  #describe(i: number): string {
    const { kind, name } = this.#shape.subjects[i];
    return `${kind} ${JSON.stringify(name)}`;
  }

  #path(i: number): string {
    const { kind, name } = this.#shape.subjects[i];
    return `global.quotas.${kind === 'tenant' ? 'tenants' : 'models'}.${name}`;
  }
}

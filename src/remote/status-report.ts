/**
 * A node's ModelControlStatus answer read straight from its bytes into what placement weighs
 * (NodeReport), for a pooled gateway's checks. protobufjs made an object of every field and a
 * string of every 64-bit count of every model of every node, then reportOf read a few of them: at
 * 64 nodes of ~300 active models that was most of a check's CPU on the thread that forwards
 * requests (bench/gateway-checks.js). This reads only the fields placement uses and skips the rest
 * by their wire type, so a field added to the message later costs nothing here. Field numbers are
 * proto/control.proto's; test/unit/remote/status-report.test.js holds the two together.
 */
import { WIRE_I64, WIRE_LEN, WIRE_VARINT } from '../shared/protobuf-wire.js';
import { WireReader } from './wire-reader.js';

/** What a node reports of itself and its models (ModelControlStatus), as placement reads it. */
export interface NodeReport {
  /** Its stable name (node_name); empty from a node older than the field. */
  nodeName: string;
  /** When its process started (ms since the epoch; 0 when it does not say). */
  startedMs: number;
  /** Its weight budget, summed over its devices (0: the weight cache off). */
  budgetBytes: number;
  /** What its sessions may hold beside weights, summed over its devices (0: no budget, or not reported). */
  sessionBudgetBytes: number;
  /** Its devices in service. */
  devices: number;
  /** Requests queued on its devices. */
  queueDepth: number;
  /** Its READY models (the answer's others are left out). */
  models: Map<string, ModelReport>;
}

export interface ModelReport {
  /** Bytes of its weights on one device when resident. */
  weightBytes: number;
  /** Bytes of its weights on the node's devices now. */
  residentBytes: number;
  /**
   * Over the node's last whole window of the health interval (node/load-windows.ts): device-seconds
   * per second its executions took, and the bytes of its weights on the devices as it ended. Every
   * gateway reading within one window gets the same.
   */
  windowLoad: number;
  windowResidentBytes: number;
  /** Weight-cache hits and misses so far (counters). */
  hits: number;
  misses: number;
  /** Its share of its open sessions' bytes, summed over the node's devices (0: none open, or not reported). */
  sessionBytes: number;
  /**
   * Over the same window: rows per second that came for it, and rows per second one device answers of
   * it at full batches from its learned costs (0: none learned, or a node older than the fields).
   */
  windowRate: number;
  windowCapacity: number;
  /**
   * Over the same window: device-seconds per second its batches waited for its weights (cold loads;
   * 0 from a node older than the field). Counted in the node's load when a model's requests are split.
   */
  windowWeightLoad?: number;
}

// ModelControlStatusResponse's fields.
const RESPONSE_MODELS = 1;
const RESPONSE_BUDGET = 2;
const RESPONSE_DEVICES = 3;
const RESPONSE_QUEUE_DEPTH = 4;
const RESPONSE_NODE_NAME = 6;
const RESPONSE_STARTED = 7;
const RESPONSE_DIGEST = 8;
const RESPONSE_SESSION_BUDGET = 9;
const RESPONSE_REPORT_VERSION = 10;
const RESPONSE_CHANGES_ONLY = 11;
const RESPONSE_GONE = 12;
const RESPONSE_WINDOW_END = 13;
// ModelControlStatus's.
const MODEL_NAME = 1;
const MODEL_STATE = 2;
const MODEL_RESIDENT_BYTES = 6;
const MODEL_WEIGHT_BYTES = 15;
const MODEL_HITS = 17;
const MODEL_MISSES = 18;
const MODEL_WINDOW_LOAD = 19;
const MODEL_WINDOW_RESIDENT = 20;
const MODEL_SESSION_BYTES = 22;
const MODEL_WINDOW_RATE = 23;
const MODEL_WINDOW_CAPACITY = 24;
const MODEL_WINDOW_WEIGHT_LOAD = 25;

/** A ModelControlStatusResponse as placement reads it. */
export interface StatusAnswer {
  report: NodeReport;
  /** Its repository digest ('' when it gives none). */
  digest: string;
  /** The version of the node's report it answers from (0: a node that does not version it). */
  version: number;
  /**
   * true: `report.models` holds only the models whose rows changed since the version asked about,
   * `gone` and `notReady` the names to drop (versioned reports; apply with `applyChanges`).
   */
  changesOnly: boolean;
  gone: string[];
  /** Models the answer names that are not READY (left out of `report.models`). */
  notReady: string[];
  /** When the window its loads are over ended (the node's clock; 0: a node older than the field). */
  windowEndMs: number;
}

/** A node's ModelControlStatusResponse read from its bytes. */
export function readStatusReport(bytes: Buffer): StatusAnswer {
  const report: NodeReport = { nodeName: '', startedMs: 0, budgetBytes: 0, sessionBudgetBytes: 0, devices: 0, queueDepth: 0, models: new Map() };
  const answer: StatusAnswer = { report, digest: '', version: 0, changesOnly: false, gone: [], notReady: [], windowEndMs: 0 };
  const r = new WireReader('ModelControlStatus answer', bytes, 0, bytes.length);
  while (r.at < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field === RESPONSE_MODELS && wireType === WIRE_LEN) {
      const [start, end] = r.span();
      readModel(r.nested(start, end), answer);
    } else if (field === RESPONSE_BUDGET && wireType === WIRE_VARINT) report.budgetBytes = r.varint();
    else if (field === RESPONSE_DEVICES && wireType === WIRE_VARINT) report.devices = r.varint();
    else if (field === RESPONSE_QUEUE_DEPTH && wireType === WIRE_VARINT) report.queueDepth = r.varint();
    else if (field === RESPONSE_NODE_NAME && wireType === WIRE_LEN) report.nodeName = r.string();
    else if (field === RESPONSE_STARTED && wireType === WIRE_VARINT) report.startedMs = r.varint();
    else if (field === RESPONSE_DIGEST && wireType === WIRE_LEN) answer.digest = r.string();
    else if (field === RESPONSE_SESSION_BUDGET && wireType === WIRE_VARINT) report.sessionBudgetBytes = r.varint();
    else if (field === RESPONSE_REPORT_VERSION && wireType === WIRE_VARINT) answer.version = r.varint();
    else if (field === RESPONSE_CHANGES_ONLY && wireType === WIRE_VARINT) answer.changesOnly = r.varint() !== 0;
    else if (field === RESPONSE_GONE && wireType === WIRE_LEN) answer.gone.push(r.string());
    else if (field === RESPONSE_WINDOW_END && wireType === WIRE_VARINT) answer.windowEndMs = r.varint();
    else r.skip(wireType);
  }
  return answer;
}

/**
 * Each READY model's weight bytes on one device, from a full answer (not active_only: every model,
 * read with the index when a node's repository digest changes). Only the name, the state and the
 * bytes are read: at 10,000 models a report of every field made 10,000 objects to keep one number
 * of each.
 */
export function readWeightBytes(bytes: Buffer): Map<string, number> {
  const weights = new Map<string, number>();
  new WireReader('ModelControlStatus answer', bytes, 0, bytes.length).forEachMessage(RESPONSE_MODELS, (m) => {
    let name = '';
    let ready = false;
    let weightBytes = 0;
    while (m.at < m.end) {
      const t = m.varint();
      const field = Math.floor(t / 8);
      const wireType = t & 7;
      if (field === MODEL_NAME && wireType === WIRE_LEN) name = m.string();
      else if (field === MODEL_STATE && wireType === WIRE_LEN) ready = m.equalsAscii('READY');
      else if (field === MODEL_WEIGHT_BYTES && wireType === WIRE_VARINT) weightBytes = m.varint();
      else m.skip(wireType);
    }
    if (ready) weights.set(name, weightBytes);
  });
  return weights;
}

/**
 * `base` brought up to date by a changes-only answer: its node's figures as the answer gives them,
 * its models with the changed rows set and the gone (or no longer READY) dropped. In place: the
 * models' map is the base's, so a check that read nothing new walks no new rows.
 */
export function applyChanges(base: NodeReport, answer: StatusAnswer): NodeReport {
  const models = base.models;
  for (const name of answer.gone) models.delete(name);
  for (const name of answer.notReady) models.delete(name);
  for (const [name, m] of answer.report.models) models.set(name, m);
  return { ...answer.report, models };
}

/** One ModelControlStatus into the answer's models if READY (one loading or unloading is not placed), else notReady. */
function readModel(r: WireReader, answer: StatusAnswer): void {
  let name = '';
  let ready = false;
  const m: ModelReport = { weightBytes: 0, residentBytes: 0, windowLoad: 0, windowResidentBytes: 0, hits: 0, misses: 0, sessionBytes: 0, windowRate: 0, windowCapacity: 0 };
  while (r.at < r.end) {
    const tag = r.varint();
    const field = Math.floor(tag / 8);
    const wireType = tag & 7;
    if (field === MODEL_NAME && wireType === WIRE_LEN) name = r.string();
    else if (field === MODEL_STATE && wireType === WIRE_LEN) ready = r.equalsAscii('READY');
    else if (field === MODEL_WEIGHT_BYTES && wireType === WIRE_VARINT) m.weightBytes = r.varint();
    else if (field === MODEL_RESIDENT_BYTES && wireType === WIRE_VARINT) m.residentBytes = r.varint();
    else if (field === MODEL_WINDOW_LOAD && wireType === WIRE_I64) m.windowLoad = r.double();
    else if (field === MODEL_WINDOW_RESIDENT && wireType === WIRE_VARINT) m.windowResidentBytes = r.varint();
    else if (field === MODEL_HITS && wireType === WIRE_VARINT) m.hits = r.varint();
    else if (field === MODEL_MISSES && wireType === WIRE_VARINT) m.misses = r.varint();
    else if (field === MODEL_SESSION_BYTES && wireType === WIRE_VARINT) m.sessionBytes = r.varint();
    else if (field === MODEL_WINDOW_RATE && wireType === WIRE_I64) m.windowRate = r.double();
    else if (field === MODEL_WINDOW_CAPACITY && wireType === WIRE_I64) m.windowCapacity = r.double();
    else if (field === MODEL_WINDOW_WEIGHT_LOAD && wireType === WIRE_I64) m.windowWeightLoad = r.double();
    else r.skip(wireType);
  }
  if (ready) answer.report.models.set(name, m);
  else answer.notReady.push(name);
}

/**
 * What a request says, checked: its parameters, read alike whichever protocol carried them, and
 * the data-plane request (shared/data-plane.ts) checked against the model it names, into the
 * tensors of the request a device actor runs (shared/channels/inference.ts).
 *
 * The parameters: each edge turns its own form into `ParameterValues` in one step (gRPC's
 * `InferParameter` oneofs in protocol/codec.ts, REST's JSON values in protocol/rest-tensors.ts);
 * what they mean to the data plane is read here, once, as the edge decodes the request: sequences
 * refused, the priority and the timeout checked, Triton's `shared_memory_*` parameters as a region
 * reference, classification refused, and everything as the plain values hooks see. An integer
 * keeps every digit as a bigint (gRPC's int64 and uint64 come as decimal strings; a JSON whole
 * number is one), so "a whole number" is a question of type, not of value: gRPC's
 * `double_param: 2` is a double, as Triton reads it.
 *
 * The tensors, once the request is leased: every mismatch is INVALID_ARGUMENT naming the tensor,
 * what was expected and what came. gRPC and REST requests and a meta model's sub-calls are checked
 * here alike; what is a protocol's (its framing, its parameter types) the edge settled before.
 *
 * The copies a request's bytes go through, end to end, are tabled at the top of request-path.ts; this
 * file makes the small message's (`inlineData`).
 */
import type { ModelSpec, TensorSpec } from './model-spec.js';
import { byDatatype, DATATYPES, dtypeInfo, type DtypeInfo } from './dtypes.js';
import { errors, quote, quoteShape } from './errors.js';
import type { InferenceRequest, RegionSlice, WireTensor } from './channels/inference.js';
import type { DataPlaneRequest, InlineBytes, PlainParameters, RegionRef, RequestInput, RequestOutput } from './data-plane.js';
import { splitBytesElements } from './bytes-elements.js';
import type { Leases } from './leases.js';
import { MAX_TIMER_MS } from './timers.js';
import { MAX_PRIORITY_LEVELS } from './constants.js';

/**
 * One parameter's value: integers as bigint (every digit kept), doubles as number; null: named, but without a value
 * (gRPC's oneof left unset).
 */
export type ParameterValue = boolean | string | number | bigint | null;

/**
 * A message's parameters by name, in an object without a prototype (a parameter named "__proto__" is one like any
 * other).
 */
export type ParameterValues = Record<string, ParameterValue>;

/** An empty set of parameters, without a prototype. */
export function noParameters(): ParameterValues {
  return Object.create(null) as ParameterValues;
}

/** How a parameter's value is shown in an error: its type and its value, cut short like any client string. */
function shown(value: ParameterValue): string {
  if (value === null) return 'no value';
  if (typeof value === 'bigint') return `the integer ${value}`;
  if (typeof value === 'number') return `the double ${value}`;
  if (typeof value === 'boolean') return `the boolean ${value}`;
  return `the string ${quote(value)}`;
}

/** Parameters as plain values (what hooks see in their context): integers as numbers; one without a value left out. */
export function plainParameters(values: ParameterValues): PlainParameters {
  const plain: PlainParameters = {};
  for (const [key, value] of Object.entries(values)) {
    if (value !== null) plain[key] = typeof value === 'bigint' ? Number(value) : value;
  }
  return plain;
}

/**
 * A request's own parameters, read as Triton reads them: sequences refused, a priority that is not
 * an unsigned integer refused, the timeout in microseconds; and all of them as plain values. Both
 * protocols' decoders spread what this returns into their request, so a field added here reaches
 * the data plane from gRPC and REST alike.
 */
export function requestParameters(values: ParameterValues): Pick<DataPlaneRequest, 'parameters' | 'timeoutUs' | 'priority'> {
  const { sequence_id: sequence, sequence_start: start, sequence_end: end, priority, timeout } = values;
  // A sequence is named by a non-zero integer or a non-empty string (Triton's two forms).
  const inSequence = (typeof sequence === 'bigint' && sequence !== 0n) || (typeof sequence === 'string' && sequence !== '');
  if (inSequence || start === true || end === true) {
    throw errors.unsupported('sequence_id/sequence_start/sequence_end: this server has no sequence batching; send independent requests');
  }
  // Triton's request priority: a level the device's scheduler serves in order (scheduler.ts; one
  // above scheduler.priority_levels is refused there); one that is not an unsigned integer is
  // refused here as Triton refuses it.
  if (priority !== undefined && !(typeof priority === 'bigint' && priority >= 0n)) {
    throw errors.invalidRequest(`parameter "priority" must be an unsigned integer (uint64_param), got ${shown(priority)}`);
  }
  const parameters = plainParameters(values);
  // 0 (or none) is the model's default level; above MAX_PRIORITY_LEVELS it names no level any node
  // file can give, refused here with the value as sent (the device refuses one above its own levels).
  if (typeof priority === 'bigint' && priority > BigInt(MAX_PRIORITY_LEVELS)) {
    throw errors.invalidRequest(`parameter "priority" ${priority} is above every priority level (scheduler.priority_levels is at most ${MAX_PRIORITY_LEVELS}): give 1 (the highest) to the server's levels, or 0 for the model's default`);
  }
  const level = typeof priority === 'bigint' && priority > 0n ? Number(priority) : 0;
  const read = level > 0 ? { parameters, priority: level } : { parameters };
  if (timeout === undefined) return read;
  if (!(typeof timeout === 'bigint' && timeout >= 0n)) {
    throw errors.invalidRequest(`parameter "timeout" must be a non-negative int64 (microseconds), got ${shown(timeout)}`);
  }
  // Past what one timer holds (2^31-1 ms, about 24.8 days, the node file's longest duration too)
  // a timeout means no timeout: the request waits as one without, under the queue bound.
  const us = Number(timeout);
  return us > 0 && us / 1000 <= MAX_TIMER_MS ? { ...read, timeoutUs: us } : read;
}

/**
 * Triton's shared_memory_* parameters of one input or output (`kind`, named `name`), as a region
 * reference; null when it uses none. The tensor is quoted only in an error: this runs for every
 * tensor of every request.
 */
export function sharedMemoryRef(kind: 'input' | 'output', name: string, values: ParameterValues): RegionRef | null {
  const { shared_memory_region: region, shared_memory_byte_size: size, shared_memory_offset: offset } = values;
  if (region === undefined && size === undefined && offset === undefined) return null;
  const what = `${kind} ${quote(name)}`;
  if (typeof region !== 'string') {
    throw errors.invalidRequest(`${what}: shared_memory_region must be a string parameter naming a registered region`);
  }
  const integer = (key: string, value: ParameterValue | undefined, fallback?: number): number => {
    if (value === undefined) {
      if (fallback !== undefined) return fallback;
      throw errors.invalidRequest(`${what}: ${key} is required with shared_memory_region`);
    }
    if (typeof value !== 'bigint' || value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw errors.invalidRequest(`${what}: ${key} must be a non-negative int64 parameter`);
    }
    return Number(value);
  };
  return { kind: 'region', region, byteSize: integer('shared_memory_byte_size', size), offset: integer('shared_memory_offset', offset, 0) };
}

/** A requested output: its region, if any; classification refused (an extension this server lacks). */
export function requestedOutput(name: string, values: ParameterValues): RequestOutput {
  if ('classification' in values) {
    throw errors.unsupported(`output ${quote(name)} asks for classification, an extension this server does not provide; request the raw output`);
  }
  return { name, region: sharedMemoryRef('output', name, values) };
}

/** What checking needs of the registered shared-memory regions (shared-memory.ts). */
export interface RegionLookup {
  /** The slice `byteSize` bytes at `offset` of region `name`, bounds checked; `what` names the tensor in errors. */
  slice(what: string, name: string, offset: number, byteSize: number): RegionSlice;
}

/** A registered region as a slice of it is cut: node/shared-memory.ts's, or an edge's copy of it. */
export interface SliceableRegion {
  id: number;
  /** The open descriptor; -1 for a CUDA region. */
  fd: number;
  key: string;
  cuda?: { gpu: number; handle: Uint8Array };
  offset: number;
  byteSize: number;
}

/**
 * The slice `byteSize` bytes at `offset` of `region` (named `name`), bounds checked; `what` names the tensor in errors.
 */
export function sliceOf(what: string, name: string, region: SliceableRegion, offset: number, byteSize: number): RegionSlice {
  if (offset < 0 || byteSize < 0 || offset + byteSize > region.byteSize) {
    throw errors.sharedMemoryInvalid(`${what}: offset ${offset} + byte_size ${byteSize} is outside region ${q(name)} of ${region.byteSize} bytes`);
  }
  // A CUDA region's key, for telling whether two slices overlap, is its registration's own.
  const common = { regionId: region.id, name, fd: region.fd, regionOffset: region.offset, regionByteSize: region.byteSize, offset, byteSize };
  return region.cuda ? { ...common, key: `cuda:${region.id}`, cuda: region.cuda } : { ...common, key: region.key };
}

/** A registered region as a thread holds it: its hold slot, tagged with its id (shared/leases.ts). */
export interface HeldRegion {
  id: number;
  slot: number;
  name: string;
}

/**
 * Hold every slice's region in `holds` (this thread's row) until `release`; a region unregistered
 * since the request was checked (its slot closed) fails it, what was taken given back through
 * `release`, which knows what a closed region's last release must do on this thread.
 */
export function holdRegions(holds: Leases, slices: readonly RegionSlice[], regionOf: (id: number) => HeldRegion | undefined, release: (slices: readonly RegionSlice[]) => void): void {
  for (const [k, s] of slices.entries()) {
    const region = regionOf(s.regionId);
    if (region && holds.acquire(region.slot, region.id)) continue;
    release(slices.slice(0, k));
    throw errors.sharedMemoryNotFound(s.name);
  }
}

/**
 * A request checked: the tensors of the InferenceRequest it becomes (the path adds the
 * instance, the deadline and the frame), and what else the path reads of it.
 */
export interface CheckedRequest extends Pick<InferenceRequest, 'inputs' | 'rows' | 'outputs' | 'outputRegions'> {
  /** Rows in this request as statistics count them (0 for an unbatched model; `rows` is then 1). */
  batchSize: number;
  /** The request's parameters as plain values (what hooks see in their context). */
  parameters: PlainParameters;
}

/**
 * May a request's owned inline bytes go on as the views they are (their ArrayBuffer, transferred
 * whole), instead of being copied? 'aligned': when each view is aligned for its datatype (what
 * typed arrays over it need: hooks); 'any': always (the device actor copies a misaligned view
 * itself, off the main thread). Bytes the request does not own are always copied.
 */
export type HandOver = 'aligned' | 'any';

const q = quote;

/** The manifest shape with the batch axis shown as -1, for messages. */
function expectedShape(t: TensorSpec): string {
  return `${quoteShape(t.shape)} (axes ${q(t.axes)}${t.batchDim >= 0 ? `, -1 = batch axis '${t.axes[t.batchDim]}'` : ''})`;
}

function checkShape(name: string, shape: readonly number[], spec: TensorSpec): void {
  const bad = shape.length !== spec.shape.length
    || shape.some((d, i) => (i === spec.batchDim ? d < 1 : d !== spec.shape[i]));
  if (bad) {
    throw errors.invalidTensor(`input ${q(name)}: expected shape ${expectedShape(spec)}, got ${quoteShape(shape)}`);
  }
}

const elementsOf = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

/** Byte size a shape of a fixed-size datatype implies must be the one given for `input` (quoted in errors only). */
function checkByteSize(input: string, info: DtypeInfo, shape: readonly number[], given: number, field: string): void {
  const elements = elementsOf(shape);
  if (info.datatype !== 'BYTES' && given !== elements * info.elementBytes) {
    throw errors.invalidTensor(`input ${q(input)}: expected ${field}${elements * info.elementBytes}${field ? '' : ' bytes'} (${elements} ${info.datatype} elements of ${info.elementBytes} bytes), got ${given}`);
  }
}

/** Inline bytes, checked against the shape: handed over as they are, or copied into a fresh transferable buffer. */
function inlineData(name: string, info: DtypeInfo, shape: readonly number[], bytes: InlineBytes, handOver: HandOver): Uint8Array {
  const raw = bytes.data;
  if (info.datatype === 'BYTES') {
    const parts = splitBytesElements(raw);
    if (!parts) {
      throw errors.invalidTensor(`input ${q(name)}: BYTES contents must be elements each prefixed by a 4-byte little-endian length; the ${raw.byteLength} bytes sent are not`);
    }
    if (parts.length !== elementsOf(shape)) {
      throw errors.invalidTensor(`input ${q(name)}: shape needs ${elementsOf(shape)} BYTES elements, raw contents hold ${parts.length}`);
    }
  } else {
    checkByteSize(name, info, shape, raw.byteLength, '');
  }
  if (bytes.owned && (handOver === 'any' || raw.byteOffset % info.elementBytes === 0)) return raw;
  const own = new Uint8Array(raw.byteLength);
  own.set(raw); // copy: a small message's bytes (or, for hooks, misaligned ones) into a buffer of their own
  return own;
}

function regionSlice(what: string, ref: RegionRef, regions: RegionLookup | undefined): RegionSlice {
  if (!regions) throw errors.sharedMemoryNotFound(ref.region);
  return regions.slice(what, ref.region, ref.offset, ref.byteSize);
}

/**
 * One request's inputs checked against the model's client inputs as they are added (known name,
 * given once, the right datatype and shape, one batch size), then as a whole (none missing, the
 * batch within max_batch_size). Requests off the wire and meta sub-calls share it.
 */
class InputSet {
  readonly #spec: ModelSpec;
  readonly #byName = new Map<string, WireTensor>();
  #batchSize = -1;
  #batchFrom = '';

  constructor(spec: ModelSpec) {
    this.#spec = spec;
  }

  /** The manifest's entry for input `name` given as `datatype` (any string off the wire), with its shape fitted. */
  fit(name: string, datatype: string, shape: readonly number[]): TensorSpec {
    const spec = this.#spec.clientInputs.find((t) => t.name === name);
    if (!spec) {
      throw errors.invalidTensor(`unknown input ${q(name)} for model ${q(this.#spec.name)}; expected inputs: ${this.#spec.clientInputs.map((t) => t.name).join(', ')}`);
    }
    if (this.#byName.has(name)) throw errors.invalidTensor(`input ${q(name)} is given twice`);
    const info = byDatatype(datatype);
    if (!info) throw errors.invalidTensor(`input ${q(name)}: unknown datatype ${q(datatype)}; KServe datatypes are ${DATATYPES.join(', ')}`);
    if (info.datatype !== spec.datatype) throw errors.invalidTensor(`input ${q(name)}: expected datatype ${spec.datatype}, got ${info.datatype}`);
    checkShape(name, shape, spec);
    if (spec.batchDim >= 0) {
      const rows = shape[spec.batchDim];
      if (this.#batchSize >= 0 && rows !== this.#batchSize) {
        throw errors.invalidTensor(`inputs disagree on the batch size: ${q(this.#batchFrom)} has ${this.#batchSize} rows, ${q(name)} has ${rows}`);
      }
      this.#batchSize = rows;
      this.#batchFrom = name;
    }
    return spec;
  }

  /** Keep a tensor `fit` accepted. */
  put(t: WireTensor): void {
    this.#byName.set(t.name, t);
  }

  /** Every input in manifest order, and the batch size (-1: no input has a batch axis). */
  complete(given: readonly string[]): { inputs: WireTensor[]; batchSize: number } {
    const spec = this.#spec;
    const missing = spec.clientInputs.map((t) => t.name).filter((n) => !this.#byName.has(n));
    if (missing.length) {
      throw errors.invalidTensor(`model ${q(spec.name)} needs input${missing.length > 1 ? 's' : ''} ${missing.map(q).join(', ')}; the request has ${given.length ? given.map(q).join(', ') : 'none'}`);
    }
    if (spec.maxBatchSize > 0 && this.#batchSize > spec.maxBatchSize) {
      throw errors.invalidTensor(`batch of ${this.#batchSize} rows exceeds model ${q(spec.name)}'s max_batch_size ${spec.maxBatchSize} (compiled batch sizes [${spec.compiledBatchSizes.join(', ')}]); split the request`);
    }
    return { inputs: spec.clientInputs.map((t) => this.#byName.get(t.name) as WireTensor), batchSize: this.#batchSize };
  }
}

/**
 * One input off the wire into the tensor the device reads: inline bytes checked (and copied if they must be), a region
 * looked up.
 */
function inputTensor(input: RequestInput, spec: TensorSpec, regions: RegionLookup | undefined, handOver: HandOver): WireTensor {
  const info = dtypeInfo(spec.datatype);
  const { name, shape, bytes } = input;
  if (bytes.kind === 'inline') return { name, datatype: info.datatype, shape, data: inlineData(name, info, shape, bytes, handOver) };
  checkByteSize(name, info, shape, bytes.byteSize, 'shared_memory_byte_size ');
  // The bytes stay in the region: the device actor reads them there.
  return { name, datatype: info.datatype, shape, data: new Uint8Array(0), shm: regionSlice(`input ${q(name)}`, bytes, regions) };
}

/** The outputs asked for, known to the model and each asked once; none asked: every output. */
function requestedOutputs(names: readonly string[], spec: ModelSpec): string[] {
  if (names.length === 0) return spec.clientOutputs.map((t) => t.name);
  const seen = new Set<string>();
  for (const name of names) {
    if (!spec.clientOutputs.some((t) => t.name === name)) {
      throw errors.invalidTensor(`unknown output ${q(name)} for model ${q(spec.name)}; expected one of: ${spec.clientOutputs.map((t) => t.name).join(', ')}`);
    }
    if (seen.has(name)) throw errors.invalidTensor(`output ${q(name)} is requested twice`);
    seen.add(name);
  }
  return [...names];
}

/** An output that goes to shared memory, checked to hold at least the output's bytes. */
function outputRegion(name: string, ref: RegionRef, spec: ModelSpec, rows: number, regions: RegionLookup | undefined): RegionSlice {
  const t = spec.clientOutputs.find((o) => o.name === name) as TensorSpec;
  const info = dtypeInfo(t.datatype);
  if (info.elementBytes > 0) {
    const needed = t.shape.reduce((a, d) => a * (d < 0 ? rows : d), 1) * info.elementBytes;
    if (ref.byteSize < needed) {
      throw errors.sharedMemoryInvalid(`output ${q(name)}: shared_memory_byte_size ${ref.byteSize} is less than the ${needed} bytes the output needs`);
    }
  }
  return regionSlice(`output ${q(name)}`, ref, regions);
}

/** Check a request against the model's manifest; `handOver` says which owned bytes may go on uncopied. */
export function checkRequest(req: DataPlaneRequest, spec: ModelSpec, regions: RegionLookup | undefined, handOver: HandOver): CheckedRequest {
  const set = new InputSet(spec);
  for (const input of req.inputs) {
    const inputSpec = set.fit(input.name, input.datatype, input.shape);
    set.put(inputTensor(input, inputSpec, regions, handOver));
  }
  const { inputs, batchSize } = set.complete(req.inputs.map((t) => t.name));
  const rows = Math.max(batchSize, 1);
  const outputs = requestedOutputs(req.outputs.map((o) => o.name), spec);
  return {
    inputs,
    rows,
    outputs,
    outputRegions: outputs.map((name) => {
      const ref = req.outputs.find((o) => o.name === name)?.region;
      return ref ? outputRegion(name, ref, spec, rows, regions) : null;
    }),
    batchSize: Math.max(batchSize, 0),
    parameters: req.parameters,
  };
}

/**
 * A meta model's sub-call: tensors its run hook built (already in wire layout, already owned by
 * this thread), checked against the sub-model's client inputs as a request's would be, without a
 * copy. `outputs` empty asks for every output.
 */
export function checkTensors(tensors: readonly WireTensor[], outputNames: readonly string[], spec: ModelSpec): CheckedRequest {
  const set = new InputSet(spec);
  for (const t of tensors) {
    set.fit(t.name, t.datatype, t.shape);
    checkByteSize(t.name, dtypeInfo(t.datatype), t.shape, t.data.byteLength, '');
    set.put(t);
  }
  const { inputs, batchSize } = set.complete(tensors.map((t) => t.name));
  const unknown = outputNames.find((o) => !spec.clientOutputs.some((t) => t.name === o));
  if (unknown !== undefined) throw errors.invalidTensor(`unknown output ${q(unknown)} for model ${q(spec.name)}; expected one of: ${spec.clientOutputs.map((t) => t.name).join(', ')}`);
  const outputs = outputNames.length ? [...new Set(outputNames)] : spec.clientOutputs.map((t) => t.name);
  return {
    inputs,
    rows: Math.max(batchSize, 1),
    outputs,
    outputRegions: outputs.map(() => null),
    batchSize: Math.max(batchSize, 0),
    parameters: {},
  };
}

/** Every shared-memory slice a checked request names, inputs and outputs. */
export function slicesOf(checked: CheckedRequest): RegionSlice[] {
  const slices = checked.inputs.flatMap((t) => (t.shm ? [t.shm] : []));
  for (const r of checked.outputRegions) if (r) slices.push(r);
  return slices;
}

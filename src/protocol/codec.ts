/**
 * The codec: a decoded ModelInferRequest into the request a device actor runs
 * (shared/channels/inference.ts), checked against the model's manifest, and
 * tensors into a ModelInferResponse. Every mismatch is INVALID_ARGUMENT naming
 * the tensor, what was expected and what came. What is protobuf stays here:
 * parameters reach the pipeline as plain values.
 *
 * The copies a request's bytes go through, end to end, are tabled at the top
 * of node/pipeline.ts; this file makes the small message's (`fromRaw`).
 */
import type { ModelSpec, TensorSpec } from '../shared/model-spec.js';
import { byDatatype, DATATYPES, dtypeInfo, type DtypeInfo } from '../shared/dtypes.js';
import { errors, quote, quoteShape } from '../shared/errors.js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { InferenceRequest, RegionSlice, WireTensor } from '../shared/channels/inference.js';
import type { HookContext } from '../shared/channels/hooks.js';

/** What decoding needs of the registered shared-memory regions (node/shared-memory.ts). */
export interface RegionLookup {
  /** The slice `byteSize` bytes at `offset` of region `name`, bounds checked; `what` names the tensor in errors. */
  slice(what: string, name: string, offset: number, byteSize: number): RegionSlice;
}
import { joinBytesElements, splitBytesElements } from '../shared/bytes-elements.js';
import type { InferInputTensor, InferTensorContents, ModelInferRequest, ModelInferResponse, Parameters } from './types.js';

/**
 * A request decoded and checked: the tensors of the InferenceRequest it becomes (the pipeline adds
 * the instance, the deadline and how to answer), and what else the pipeline reads of it.
 */
export interface DecodedRequest extends Pick<InferenceRequest, 'inputs' | 'rows' | 'outputs' | 'outputRegions'> {
  /** Rows in this request as statistics count them (0 for an unbatched model; `rows` is then 1). */
  batchSize: number;
  /** The KServe `timeout` parameter in microseconds, if the client set one. */
  timeoutUs?: number;
  /** The request's parameters as plain values (what hooks see in their context). */
  parameters: HookContext['parameters'];
}

/** A request's parameters as plain values: int64/uint64 (strings on the wire, every digit kept) as numbers. */
function plainParameters(params: Parameters): HookContext['parameters'] {
  const plain: HookContext['parameters'] = {};
  for (const [key, p] of Object.entries(params)) {
    if (!p.parameter_choice) continue;
    const value = p[p.parameter_choice] as boolean | number | string;
    plain[key] = p.parameter_choice === 'int64_param' || p.parameter_choice === 'uint64_param' ? Number(value) : value;
  }
  return plain;
}

const q = quote;
const fmtShape = quoteShape;

/** The manifest shape with the batch axis shown as -1, for messages. */
function expectedShape(t: TensorSpec): string {
  return `${fmtShape(t.shape)} (axes ${q(t.axes)}${t.batchDim >= 0 ? `, -1 = batch axis '${t.axes[t.batchDim]}'` : ''})`;
}

function parseShape(input: InferInputTensor): number[] {
  return input.shape.map((s) => {
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < 0) {
      throw errors.invalidTensor(`input ${q(input.name)}: shape ${fmtShape(input.shape)} has an invalid dimension ${String(s).slice(0, 40)}: each must be a whole number from 0 to 2^53-1`);
    }
    return n;
  });
}

function checkShape(name: string, shape: readonly number[], spec: TensorSpec): void {
  const bad = shape.length !== spec.shape.length
    || shape.some((d, i) => (i === spec.batchDim ? d < 1 : d !== spec.shape[i]));
  if (bad) {
    throw errors.invalidTensor(`input ${q(name)}: expected shape ${expectedShape(spec)}, got ${fmtShape(shape)}`);
  }
}

const INTEGER_RANGES: Partial<Record<string, [number, number]>> = {
  INT8: [-128, 127], INT16: [-32768, 32767], INT32: [-(2 ** 31), 2 ** 31 - 1],
  UINT8: [0, 255], UINT16: [0, 65535], UINT32: [0, 2 ** 32 - 1],
};

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * Typed `contents` into wire bytes, checking the field matches the datatype and the count the shape.
 * copy: every branch converts the decoded JS values into a fresh buffer (the typed-contents path's copy).
 */
function fromContents(name: string, info: DtypeInfo, contents: InferTensorContents, elements: number): Uint8Array {
  const used = (Object.keys(contents) as (keyof InferTensorContents)[]).filter((k) => contents[k]?.length > 0);
  if (info.contentsField === null) {
    throw errors.invalidTensor(`input ${q(name)}: ${info.datatype} values must be sent in raw_input_contents; typed contents have no ${info.datatype} field`);
  }
  const wrong = used.filter((k) => k !== info.contentsField);
  if (wrong.length) {
    throw errors.invalidTensor(`input ${q(name)} is ${info.datatype}: put its values in contents.${info.contentsField}, not ${wrong.map((k) => `contents.${k}`).join(', ')}`);
  }
  const values = contents[info.contentsField] as unknown[];
  if (values.length !== elements) {
    throw errors.invalidTensor(`input ${q(name)}: shape needs ${elements} elements, contents.${info.contentsField} has ${values.length}`);
  }
  switch (info.datatype) {
    // copy: typed contents converted into the datatype's bytes (the table's "typed contents")
    case 'BOOL':
      return Uint8Array.from(values as boolean[], (b) => (b ? 1 : 0)); // copy: (as above)
    case 'INT64':
      return bytesOf(BigInt64Array.from(values as string[], (s) => BigInt(s))); // copy: (as above)
    case 'UINT64':
      return bytesOf(BigUint64Array.from(values as string[], (s) => BigInt(s))); // copy: (as above)
    case 'BYTES':
      return joinBytesElements(values as Buffer[]);
    default: {
      const range = INTEGER_RANGES[info.datatype];
      if (range) {
        const i = (values as number[]).findIndex((v) => v < range[0] || v > range[1]);
        if (i >= 0) throw errors.invalidTensor(`input ${q(name)}: element ${i} = ${values[i] as number} is out of range for ${info.datatype} [${range[0]}, ${range[1]}]`);
      }
      return bytesOf((info.typedArray as Float32ArrayConstructor).from(values as number[]));
    }
  }
}

/**
 * May a request's raw bytes go on as the views they are (the message's ArrayBuffer, transferred
 * whole), instead of being copied? 'none': no (the message shares its memory; message-buffers.ts);
 * 'aligned': when each view is aligned for its datatype (what typed arrays over it need: hooks);
 * 'any': always (the device actor copies a misaligned view itself, off the main thread).
 */
export type HandOver = 'none' | 'aligned' | 'any';

/** Raw bytes, checked against the byte size the shape and datatype imply: handed over as they are, or copied into a fresh transferable buffer. */
function fromRaw(name: string, info: DtypeInfo, raw: Uint8Array, elements: number, handOver: HandOver): Uint8Array {
  if (info.datatype === 'BYTES') {
    const parts = splitBytesElements(raw);
    if (!parts) {
      throw errors.invalidTensor(`input ${q(name)}: BYTES contents must be elements each prefixed by a 4-byte little-endian length; the ${raw.byteLength} bytes sent are not`);
    }
    if (parts.length !== elements) {
      throw errors.invalidTensor(`input ${q(name)}: shape needs ${elements} BYTES elements, raw contents hold ${parts.length}`);
    }
  } else if (raw.byteLength !== elements * info.elementBytes) {
    throw errors.invalidTensor(`input ${q(name)}: expected ${elements * info.elementBytes} bytes (${elements} ${info.datatype} elements of ${info.elementBytes} bytes), got ${raw.byteLength}`);
  }
  if (handOver === 'any' || (handOver === 'aligned' && raw.byteOffset % info.elementBytes === 0)) return raw;
  const own = new Uint8Array(raw.byteLength);
  own.set(raw); // copy: a small message's bytes (or, for hooks, misaligned ones) into a buffer of their own
  return own;
}

interface SharedMemoryParams {
  region: string;
  offset: number;
  byteSize: number;
}

/** Triton's shared_memory_* parameters of one input or output; null when it uses none. */
function sharedMemoryParams(what: string, params: Parameters): SharedMemoryParams | null {
  const { shared_memory_region: region, shared_memory_byte_size: size, shared_memory_offset: offset } = params;
  if (!region && !size && !offset) return null;
  if (!region || region.parameter_choice !== 'string_param') {
    throw errors.invalidRequest(`${what}: shared_memory_region must be a string parameter naming a registered region`);
  }
  const integer = (key: string, p: Parameters[string] | undefined, fallback?: number): number => {
    if (!p) {
      if (fallback !== undefined) return fallback;
      throw errors.invalidRequest(`${what}: ${key} is required with shared_memory_region`);
    }
    const raw = p.parameter_choice === 'int64_param' ? p.int64_param : p.parameter_choice === 'uint64_param' ? p.uint64_param : undefined;
    const n = Number(raw);
    if (raw === undefined || !Number.isSafeInteger(n) || n < 0) throw errors.invalidRequest(`${what}: ${key} must be a non-negative int64 parameter`);
    return n;
  };
  return { region: region.string_param as string, byteSize: integer('shared_memory_byte_size', size), offset: integer('shared_memory_offset', offset, 0) };
}

function regionSlice(what: string, p: SharedMemoryParams, regions: RegionLookup | undefined): RegionSlice {
  if (!regions) throw errors.sharedMemoryNotFound(p.region);
  return regions.slice(what, p.region, p.offset, p.byteSize);
}

/** A client's parameter for a message: its type and its value, cut short like any client string. */
function shownParameter(p: Parameters[string]): string {
  const choice = p.parameter_choice;
  return choice ? `${choice} ${quote(String((p as Record<string, unknown>)[choice]))}` : 'no value';
}

/** The longest delay a Node timer holds. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function checkRequestParameters(params: Parameters): number | undefined {
  const seq = params.sequence_id;
  const inSequence = seq !== undefined
    && ((seq.int64_param ?? seq.uint64_param ?? '0') !== '0' || (seq.string_param ?? '') !== '');
  if (inSequence || params.sequence_start?.bool_param || params.sequence_end?.bool_param) {
    throw errors.unsupported('sequence_id/sequence_start/sequence_end: this server has no sequence batching; send independent requests');
  }
  // Triton's request priority: its value is not used (the scheduler shares the device by cost
  // and fairness), but a priority that is not an unsigned integer is refused as Triton refuses it.
  const priority = params.priority;
  if (priority !== undefined) {
    const raw = priority.uint64_param ?? priority.int64_param;
    if (raw === undefined || String(raw).startsWith('-')) {
      throw errors.invalidRequest(`parameter "priority" must be an unsigned integer (uint64_param), got ${shownParameter(priority)}`);
    }
  }
  const timeout = params.timeout;
  if (timeout === undefined) return undefined;
  const raw = timeout.int64_param ?? timeout.uint64_param;
  const us = raw === undefined ? NaN : Number(raw);
  if (!Number.isFinite(us) || us < 0) {
    throw errors.invalidRequest(`parameter "timeout" must be a non-negative int64 (microseconds), got ${shownParameter(timeout)}`);
  }
  // Past what a timer can hold (2^31-1 ms, about 24.8 days) a timeout means no timeout: a timer
  // asked for longer fires at once, which would fail the request instead.
  return us > 0 && us / 1000 <= MAX_TIMER_MS ? us : undefined;
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

  /** The manifest's entry for input `name` given as `datatype` (any string off the wire). */
  specOf(name: string, datatype: string): TensorSpec {
    const spec = this.#spec.clientInputs.find((t) => t.name === name);
    if (!spec) {
      throw errors.invalidTensor(`unknown input ${q(name)} for model ${q(this.#spec.name)}; expected inputs: ${this.#spec.clientInputs.map((t) => t.name).join(', ')}`);
    }
    if (this.#byName.has(name)) throw errors.invalidTensor(`input ${q(name)} is given twice`);
    const info = byDatatype(datatype);
    if (!info) throw errors.invalidTensor(`input ${q(name)}: unknown datatype ${q(datatype)}; KServe datatypes are ${DATATYPES.join(', ')}`);
    if (info.datatype !== spec.datatype) throw errors.invalidTensor(`input ${q(name)}: expected datatype ${spec.datatype}, got ${info.datatype}`);
    return spec;
  }

  /** Input `name`'s shape must fit its manifest entry and agree with the others on the batch size. */
  fit(name: string, shape: readonly number[], spec: TensorSpec): void {
    checkShape(name, shape, spec);
    if (spec.batchDim < 0) return;
    const rows = shape[spec.batchDim];
    if (this.#batchSize >= 0 && rows !== this.#batchSize) {
      throw errors.invalidTensor(`inputs disagree on the batch size: ${q(this.#batchFrom)} has ${this.#batchSize} rows, ${q(name)} has ${rows}`);
    }
    this.#batchSize = rows;
    this.#batchFrom = name;
  }

  /** Keep a tensor `specOf` and `fit` accepted. */
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

/** Decode and check a request against the model's manifest; `handOver` says whether its raw bytes may go on uncopied. */
export function decodeInferRequest(req: ModelInferRequest, spec: ModelSpec, regions?: RegionLookup, handOver: HandOver = 'none'): DecodedRequest {
  const timeoutUs = checkRequestParameters(req.parameters);
  const inputRegions = req.inputs.map((input) => sharedMemoryParams(`input ${q(input.name)}`, input.parameters));
  // raw_input_contents holds one entry per input that is not in shared memory, in input order.
  let inline = 0;
  const rawIndex = inputRegions.map((r) => (r ? -1 : inline++));
  const useRaw = req.raw_input_contents.length > 0;
  if (useRaw && req.raw_input_contents.length !== inline) {
    throw errors.invalidRequest(`raw_input_contents has ${req.raw_input_contents.length} entries for ${inline} inputs not in shared memory; send one entry per such input, in the order of inputs`);
  }
  const set = new InputSet(spec);
  req.inputs.forEach((input, i) => {
    const spec_ = set.specOf(input.name, input.datatype);
    const info = dtypeInfo(spec_.datatype);
    const shape = parseShape(input);
    set.fit(input.name, shape, spec_);
    const elements = shape.reduce((a, b) => a * b, 1);
    const hasContents = input.contents !== null
      && Object.values(input.contents).some((v) => Array.isArray(v) && v.length > 0);
    let data: Uint8Array;
    let shm: RegionSlice | undefined;
    const region = inputRegions[i];
    if (region) {
      if (hasContents) throw errors.invalidRequest(`input ${q(input.name)} sets contents and shared_memory_region; use one or the other`);
      if (info.datatype !== 'BYTES' && region.byteSize !== elements * info.elementBytes) {
        throw errors.invalidTensor(`input ${q(input.name)}: expected shared_memory_byte_size ${elements * info.elementBytes} (${elements} ${info.datatype} elements of ${info.elementBytes} bytes), got ${region.byteSize}`);
      }
      shm = regionSlice(`input ${q(input.name)}`, region, regions);
      data = new Uint8Array(0); // the bytes stay in the region: the device actor reads them there
    } else if (useRaw) {
      if (hasContents) throw errors.invalidRequest(`input ${q(input.name)} sets contents while the request uses raw_input_contents; use one or the other`);
      data = fromRaw(input.name, info, req.raw_input_contents[rawIndex[i]], elements, handOver);
    } else if (hasContents || elements === 0) {
      data = fromContents(input.name, info, input.contents as InferTensorContents, elements);
    } else {
      throw errors.invalidTensor(`input ${q(input.name)} has no data: send it in raw_input_contents or contents.${info.contentsField ?? 'raw'}`);
    }
    set.put(shm ? { name: input.name, datatype: info.datatype, shape, data, shm } : { name: input.name, datatype: info.datatype, shape, data });
  });
  const { inputs, batchSize } = set.complete(req.inputs.map((t) => t.name));
  const outputs = decodeRequestedOutputs(req, spec);
  return {
    inputs,
    rows: Math.max(batchSize, 1),
    outputs,
    outputRegions: decodeOutputRegions(req, spec, outputs, Math.max(batchSize, 1), regions),
    batchSize: Math.max(batchSize, 0),
    timeoutUs,
    parameters: plainParameters(req.parameters),
  };
}

/**
 * A meta model's sub-call: tensors its run hook built (already in wire layout, already owned by
 * this thread), checked against the sub-model's client inputs as a request's would be, without a
 * copy. `outputs` empty asks for every output.
 */
export function decodeTensors(tensors: readonly WireTensor[], outputNames: readonly string[], spec: ModelSpec): DecodedRequest {
  const set = new InputSet(spec);
  for (const t of tensors) {
    set.fit(t.name, t.shape, set.specOf(t.name, t.datatype));
    const elements = t.shape.reduce((a, b) => a * b, 1);
    const info = dtypeInfo(t.datatype);
    if (info.datatype !== 'BYTES' && t.data.byteLength !== elements * info.elementBytes) {
      throw errors.invalidTensor(`input ${q(t.name)}: expected ${elements * info.elementBytes} bytes (${elements} ${info.datatype} elements of ${info.elementBytes} bytes), got ${t.data.byteLength}`);
    }
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

/** Every shared-memory slice a decoded request names, inputs and outputs. */
export function slicesOf(decoded: DecodedRequest): RegionSlice[] {
  const slices = decoded.inputs.flatMap((t) => (t.shm ? [t.shm] : []));
  for (const r of decoded.outputRegions) if (r) slices.push(r);
  return slices;
}

/** Requested outputs that go to shared memory, checked to hold at least the output's bytes. */
function decodeOutputRegions(req: ModelInferRequest, spec: ModelSpec, outputs: string[], rows: number,
  regions: RegionLookup | undefined): (RegionSlice | null)[] {
  return outputs.map((name) => {
    const requested = req.outputs.find((o) => o.name === name);
    const params = requested && sharedMemoryParams(`output ${q(name)}`, requested.parameters);
    if (!params) return null;
    const t = spec.clientOutputs.find((o) => o.name === name) as TensorSpec;
    const info = dtypeInfo(t.datatype);
    if (info.elementBytes > 0) {
      const needed = t.shape.reduce((a, d) => a * (d < 0 ? rows : d), 1) * info.elementBytes;
      if (params.byteSize < needed) {
        throw errors.sharedMemoryInvalid(`output ${q(name)}: shared_memory_byte_size ${params.byteSize} is less than the ${needed} bytes the output needs`);
      }
    }
    return regionSlice(`output ${q(name)}`, params, regions);
  });
}


function decodeRequestedOutputs(req: ModelInferRequest, spec: ModelSpec): string[] {
  if (req.outputs.length === 0) return spec.clientOutputs.map((t) => t.name);
  const seen = new Set<string>();
  for (const out of req.outputs) {
    if (!spec.clientOutputs.some((t) => t.name === out.name)) {
      throw errors.invalidTensor(`unknown output ${q(out.name)} for model ${q(spec.name)}; expected one of: ${spec.clientOutputs.map((t) => t.name).join(', ')}`);
    }
    if (seen.has(out.name)) throw errors.invalidTensor(`output ${q(out.name)} is requested twice`);
    seen.add(out.name);
    if ('classification' in out.parameters) {
      throw errors.unsupported(`output ${q(out.name)} asks for classification, an extension this server does not provide; request the raw output`);
    }
  }
  return req.outputs.map((o) => o.name);
}

/**
 * Outputs into a response object, for protobufjs to encode: the answers of models with hooks
 * (their outputs come from the hook pool). Others arrive encoded by the device
 * (shared/infer-response-wire.ts). Raw bytes are wrapped, not copied (protobufjs copies while encoding).
 * An output written to shared memory keeps its place with an empty entry, because clients find
 * an output's raw contents by its position among the outputs.
 */
export function inferResponse(spec: ModelSpec, id: string, outputs: readonly WireTensor[]): ModelInferResponse {
  return {
    model_name: spec.name,
    model_version: MODEL_VERSION,
    id,
    outputs: outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape })),
    raw_output_contents: outputs.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
  };
}

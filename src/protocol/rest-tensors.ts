/**
 * The KServe V2 REST inference body, with Triton's binary tensor data extension, to and from the
 * data plane (shared/data-plane.ts): the request the request path takes, as gRPC's codec.ts makes it,
 * so that a request through REST runs exactly the path one through gRPC runs. No gRPC message or
 * parameter is built: JSON parameters become the values shared/request-check.ts reads for both protocols.
 *
 * Request: a JSON header (the whole body, or its first `Inference-Header-Content-Length` bytes)
 * whose inputs carry `data` (flat or nested, row-major) or `parameters.binary_data_size`: that
 * many bytes of the binary part, in input order. Every inline input becomes raw bytes, so the
 * request path checks every input alike. The JSON is read within bounds and in slices
 * (json-reader.ts), and `data` decoded straight into its datatype (json-tensors.ts).
 * Response: each output as JSON `data`, or as binary when the request asked (the request's
 * `binary_data_output`, or the output's `binary_data`): `parameters.binary_data_size` in the JSON
 * header and its bytes after it, in output order.
 */
import { byDatatype, type Datatype } from '../shared/dtypes.js';
import { errors, quote } from '../shared/errors.js';
import { decodeJsonData, encodeJsonData } from './json-tensors.js';
import { JSON_MAX_DEPTH, JsonError, RawJson, readJson, type JsonObject, type JsonValue } from './json-reader.js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { DataPlaneRequest, InferenceAnswer, RequestInput } from '../shared/data-plane.js';
import { noParameters, plainParameters, requestedOutput, requestParameters, sharedMemoryRef, type ParameterValues } from '../shared/request-check.js';
import { ownsArrayBuffer } from './proto.js';

const isObject = (v: JsonValue | undefined): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof RawJson);

/** Values the JSON of an inference body may build apart from its tensors' data (names, shapes, parameters). */
export const JSON_MAX_VALUES = 100_000;

/** Dimensions a tensor's shape may have (ONNX Runtime's own limit is 64). */
const MAX_DIMS = 64;

/** Where a tensor's data sits in an inference body: `inputs[i].data`, left to json-tensors.ts. */
const isTensorData = (path: readonly (string | number)[]) => path.length === 3 && path[0] === 'inputs' && typeof path[1] === 'number' && path[2] === 'data';

/** A body's JSON, read within the limits (json-reader.ts); a JsonError becomes INVALID_ARGUMENT naming the byte. */
export async function readJsonBody(bytes: Uint8Array, what: string, defer?: (path: readonly (string | number)[]) => boolean): Promise<JsonValue> {
  try {
    return await readJson(bytes, { limits: { maxDepth: JSON_MAX_DEPTH, maxValues: JSON_MAX_VALUES }, defer });
  } catch (err) {
    if (err instanceof JsonError) throw errors.invalidRequest(`${what}'s JSON is not valid: ${err.message}`);
    throw err;
  }
}

/**
 * A JSON `parameters` object as the data plane reads parameters (shared/request-check.ts): a whole number
 * as an integer, any other finite number as a double, booleans and strings as they are.
 */
export function jsonParameters(json: JsonValue | undefined, what: string): ParameterValues {
  const values = noParameters();
  if (json === undefined || json === null) return values;
  if (!isObject(json)) throw errors.invalidRequest(`${what}: parameters must be an object`);
  for (const [key, v] of Object.entries(json)) {
    if (typeof v === 'boolean' || typeof v === 'string') values[key] = v;
    else if (typeof v === 'number' && Number.isInteger(v)) values[key] = BigInt(v);
    else if (typeof v === 'number' && Number.isFinite(v)) values[key] = v;
    else throw errors.invalidRequest(`${what}: parameter ${quote(key)} must be a boolean, a finite number or a string`);
  }
  return values;
}

/** An input's shape: whole numbers, at most MAX_DIMS of them, the element count a safe integer. */
function shapeOf(name: string, shape: JsonValue | undefined): number[] {
  if (!Array.isArray(shape) || shape.length > MAX_DIMS || !shape.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0)) {
    const shown = Array.isArray(shape) && shape.length > 8 ? `an array of ${shape.length}` : JSON.stringify(shape instanceof RawJson ? null : shape)?.slice(0, 80);
    throw errors.invalidTensor(`input ${quote(name)}: shape must be an array of at most ${MAX_DIMS} whole numbers, not ${shown}`);
  }
  const dims = shape as number[];
  const count = dims.reduce((a, b) => a * b, 1);
  if (!Number.isSafeInteger(count)) throw errors.invalidTensor(`input ${quote(name)}: shape [${dims.join(', ')}] holds more elements than can be counted`);
  return dims;
}

/** What the response needs of the request besides the answer: which outputs go as binary, what each asked. */
export interface RestInfer {
  request: DataPlaneRequest;
  /** The request's `binary_data_output`: every output binary unless it says otherwise. */
  allBinary: boolean;
  /** Each output asked for, by name: its own `binary_data`, and its parameters (echoed for shared memory). */
  asked: Map<string, { binary?: boolean; parameters: ParameterValues }>;
}

/**
 * A REST inference body as the data plane's request. `headerBytes`: the JSON header's length
 * when the body carries binary data (Inference-Header-Content-Length), else the whole body is
 * JSON. The JSON is read in slices within its limits, and each input's `data` decoded straight
 * into its datatype's bytes (json-tensors.ts). The body is read by nothing after this.
 */
export async function parseRestInfer(body: Buffer, headerBytes: number | undefined, model: string, version: string): Promise<RestInfer> {
  const jsonEnd = headerBytes ?? body.length;
  if (!(jsonEnd >= 0 && jsonEnd <= body.length)) {
    throw errors.invalidRequest(`Inference-Header-Content-Length ${headerBytes} is past the body's ${body.length} bytes`);
  }
  const json = body.subarray(0, jsonEnd);
  const header = await readJsonBody(json, 'the inference request', isTensorData);
  if (!isObject(header)) throw errors.invalidRequest('the inference request must be a JSON object with "inputs"');
  if (!Array.isArray(header.inputs)) throw errors.invalidRequest('the inference request has no "inputs" array');
  // Binary inputs are views of the body: handed over as they are when it owns its memory, as a large gRPC message's
  // are.
  const owned = ownsArrayBuffer(body, 0);
  let binaryAt = jsonEnd;
  const inputs: RequestInput[] = [];
  for (const [k, input] of header.inputs.entries()) {
    if (!isObject(input)) throw errors.invalidRequest(`inputs[${k}] must be an object`);
    const { name, datatype } = input;
    if (typeof name !== 'string') throw errors.invalidRequest(`inputs[${k}] has no "name"`);
    if (typeof datatype !== 'string' || !byDatatype(datatype)) throw errors.invalidTensor(`input ${quote(name)}: datatype ${typeof datatype === 'string' ? quote(datatype) : 'missing'} is not a KServe datatype`);
    const shape = shapeOf(name, input.shape);
    const parameters = jsonParameters(input.parameters, `input ${quote(name)}`);
    const size = isObject(input.parameters) ? input.parameters.binary_data_size : undefined;
    const region = sharedMemoryRef('input', name, parameters);
    if (size !== undefined) {
      if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) throw errors.invalidRequest(`input ${quote(name)}: binary_data_size must be a whole number`);
      if (binaryAt + size > body.length) {
        throw errors.invalidRequest(`input ${quote(name)}: binary_data_size ${size} runs past the body (${body.length - binaryAt} bytes of binary data left)`);
      }
      if (region) throw errors.invalidRequest(`input ${quote(name)} sets binary_data_size and shared_memory_region; use one or the other`);
      inputs.push({ name, datatype, shape, bytes: { kind: 'inline', data: body.subarray(binaryAt, binaryAt + size), owned } });
      binaryAt += size;
    } else if (input.data instanceof RawJson) {
      if (region) throw errors.invalidRequest(`input ${quote(name)} sets data and shared_memory_region; use one or the other`);
      // Decoded into bytes that own their buffer: transferred to the device as they are.
      inputs.push({ name, datatype, shape, bytes: { kind: 'inline', data: await decodeJsonData(json, input.data, name, datatype as Datatype, shape), owned: true } });
    } else if (region) {
      inputs.push({ name, datatype, shape, bytes: region });
    } else {
      throw errors.invalidTensor(`input ${quote(name)} has no "data", no binary_data_size and no shared_memory_region`);
    }
  }
  if (binaryAt !== body.length) throw errors.invalidRequest(`${body.length - binaryAt} bytes of binary data follow the inputs that no input's binary_data_size claims`);
  const outputs = header.outputs === undefined ? [] : header.outputs;
  if (!Array.isArray(outputs)) throw errors.invalidRequest('"outputs" must be an array');
  const requestParams = jsonParameters(header.parameters, 'the request');
  const asked = new Map<string, { binary?: boolean; parameters: ParameterValues }>();
  const requested = outputs.map((o, k) => {
    if (!isObject(o) || typeof o.name !== 'string') throw errors.invalidRequest(`outputs[${k}] must be an object with a "name"`);
    const parameters = jsonParameters(o.parameters, `output ${quote(o.name)}`);
    const binary = typeof parameters.binary_data === 'boolean' ? parameters.binary_data : undefined;
    asked.set(o.name, binary === undefined ? { parameters } : { binary, parameters });
    return requestedOutput(o.name, parameters);
  });
  return {
    request: {
      model,
      version,
      id: typeof header.id === 'string' ? header.id : '',
      inputs,
      outputs: requested,
      ...requestParameters(requestParams),
    },
    allBinary: requestParams.binary_data_output === true,
    asked,
  };
}

/**
 * The answer as a REST body, in pieces written one after the other: JSON alone, or (some output
 * binary) the JSON header followed by the outputs' bytes as they are (no join), with the header's
 * length for Inference-Header-Content-Length. Outputs' JSON data is written in slices
 * (json-tensors.ts), NaN and Infinity as Triton writes them.
 */
export async function restInferResponse(rest: RestInfer, answer: InferenceAnswer): Promise<{ body: Buffer[]; headerBytes?: number }> {
  const { request } = rest;
  const binaries: Buffer[] = [];
  const json: string[] = [`{"model_name":${JSON.stringify(request.model)},"model_version":${JSON.stringify(MODEL_VERSION)}${request.id ? `,"id":${JSON.stringify(request.id)}` : ''},"outputs":[`];
  for (const [i, o] of answer.outputs.entries()) {
    const asked = rest.asked.get(o.name);
    const bytes = Buffer.from(o.data.buffer, o.data.byteOffset, o.data.byteLength);
    json.push(`${i === 0 ? '' : ','}{"name":${JSON.stringify(o.name)},"datatype":${JSON.stringify(o.datatype)},"shape":[${o.shape.join(',')}]`);
    if (asked?.parameters.shared_memory_region !== undefined) {
      json.push(`,"parameters":${JSON.stringify(plainParameters(asked.parameters))}}`);
      continue;
    }
    const binary = asked?.binary ?? rest.allBinary;
    // FP16 and BF16 have no JSON form: binary whatever was asked.
    if (binary || o.datatype === 'FP16' || o.datatype === 'BF16' || !byDatatype(o.datatype)) {
      binaries.push(bytes);
      json.push(`,"parameters":{"binary_data_size":${bytes.length}}}`);
      continue;
    }
    json.push(',"data":', ...(await encodeJsonData(o.datatype, bytes)), '}');
  }
  json.push(']}');
  const header = json.map((piece) => Buffer.from(piece, 'utf8'));
  if (binaries.length === 0) return { body: header };
  return { body: [...header, ...binaries], headerBytes: header.reduce((n, b) => n + b.length, 0) };
}

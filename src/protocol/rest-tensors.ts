/**
 * The KServe V2 REST inference body, with Triton's binary tensor data extension, to and from the
 * request and response the pipeline takes and gives (the gRPC messages' shapes, types.ts), so that
 * a request through REST runs exactly the path one through gRPC runs.
 *
 * Request: a JSON header (the whole body, or its first `Inference-Header-Content-Length` bytes)
 * whose inputs carry `data` (flat or nested, row-major) or `parameters.binary_data_size`: that
 * many bytes of the binary part, in input order. Every inline input becomes raw bytes
 * (raw_input_contents), so the codec checks every input alike.
 * Response: each output as JSON `data`, or as binary when the request asked (the request's
 * `binary_data_output`, or the output's `binary_data`): `parameters.binary_data_size` in the JSON
 * header and its bytes after it, in output order.
 */
import { byDatatype, dtypeInfo, type Datatype } from '../shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../shared/bytes-elements.js';
import { errors } from '../shared/errors.js';
import type { InferInputTensor, InferParameter, ModelInferRequest, ModelInferResponse, Parameters } from './types.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const isObject = (v: Json | undefined): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** JSON parameters as the gRPC messages carry them (int64 as strings, as proto-loader gives them). */
export function toParameters(json: Json | undefined, what: string): Parameters {
  if (json === undefined || json === null) return {};
  if (!isObject(json)) throw errors.invalidRequest(`${what}: parameters must be an object`);
  const out: Parameters = {};
  for (const [key, v] of Object.entries(json)) {
    let p: InferParameter;
    if (typeof v === 'boolean') p = { parameter_choice: 'bool_param', bool_param: v };
    else if (typeof v === 'string') p = { parameter_choice: 'string_param', string_param: v };
    else if (typeof v === 'number' && Number.isInteger(v)) p = { parameter_choice: 'int64_param', int64_param: String(v) };
    else if (typeof v === 'number') p = { parameter_choice: 'double_param', double_param: v };
    else throw errors.invalidRequest(`${what}: parameter ${JSON.stringify(key)} must be a boolean, number or string`);
    out[key] = p;
  }
  return out;
}

/** Parameters back to JSON (for the response). */
function fromParameters(p: Parameters | undefined): JsonObject {
  const out: JsonObject = {};
  for (const [key, v] of Object.entries(p ?? {})) {
    if (!v.parameter_choice) continue;
    const value = v[v.parameter_choice];
    out[key] = v.parameter_choice === 'int64_param' || v.parameter_choice === 'uint64_param' ? Number(value) : (value as Json);
  }
  return out;
}

function flatten(data: Json, into: Json[]): Json[] {
  if (Array.isArray(data)) for (const d of data) flatten(d, into);
  else into.push(data);
  return into;
}

/** One input's JSON `data` as the raw bytes of its datatype, checked against its shape. */
function jsonData(name: string, datatype: Datatype, shape: number[], data: Json): Uint8Array {
  const values = flatten(data, []);
  const count = shape.reduce((a, b) => a * b, 1);
  if (values.length !== count) throw errors.invalidTensor(`input ${JSON.stringify(name)}: shape [${shape.join(', ')}] needs ${count} elements, its data holds ${values.length}`);
  const info = dtypeInfo(datatype);
  const bad = (i: number, want: string) => errors.invalidTensor(`input ${JSON.stringify(name)}: element ${i} is ${JSON.stringify(values[i])}, not ${want} (datatype ${datatype})`);
  if (datatype === 'BYTES') {
    return joinBytesElements(values.map((v, i) => {
      if (typeof v !== 'string') throw bad(i, 'a string');
      return new TextEncoder().encode(v);
    }));
  }
  if (datatype === 'BOOL') {
    // copy: JSON booleans converted into bytes (the table's REST JSON row: a conversion)
    return Uint8Array.from(values, (v, i) => {
      if (typeof v !== 'boolean') throw bad(i, 'true or false');
      return v ? 1 : 0;
    });
  }
  if (datatype === 'FP16' || datatype === 'BF16') {
    throw errors.invalidTensor(`input ${JSON.stringify(name)}: ${datatype} has no JSON form; send it as binary data (parameters.binary_data_size)`);
  }
  if (datatype === 'INT64' || datatype === 'UINT64') {
    const out = datatype === 'INT64' ? new BigInt64Array(count) : new BigUint64Array(count);
    values.forEach((v, i) => {
      if (typeof v !== 'number' || !Number.isInteger(v)) throw bad(i, 'an integer');
      out[i] = BigInt(v);
    });
    return new Uint8Array(out.buffer);
  }
  const Typed = info.typedArray as unknown as { new (n: number): ArrayLike<number> & { buffer: ArrayBuffer; [i: number]: number } };
  const out = new Typed(count);
  values.forEach((v, i) => {
    if (typeof v !== 'number') throw bad(i, 'a number');
    out[i] = v;
  });
  return new Uint8Array(out.buffer);
}

/**
 * A REST inference body as the ModelInferRequest the pipeline takes. `headerBytes`: the JSON
 * header's length when the body carries binary data (Inference-Header-Content-Length), else the
 * whole body is JSON.
 */
export function parseRestInfer(body: Buffer, headerBytes: number | undefined, model: string, version: string): ModelInferRequest {
  const jsonEnd = headerBytes ?? body.length;
  if (!(jsonEnd >= 0 && jsonEnd <= body.length)) {
    throw errors.invalidRequest(`Inference-Header-Content-Length ${headerBytes} is past the body's ${body.length} bytes`);
  }
  let header: Json;
  try {
    header = JSON.parse(body.subarray(0, jsonEnd).toString('utf8')) as Json;
  } catch (err) {
    throw errors.invalidRequest(`the inference request's JSON is not valid: ${(err as Error).message}`);
  }
  if (!isObject(header)) throw errors.invalidRequest('the inference request must be a JSON object with "inputs"');
  if (!Array.isArray(header.inputs)) throw errors.invalidRequest('the inference request has no "inputs" array');
  let binaryAt = jsonEnd;
  const raw: Buffer[] = [];
  const inputs: InferInputTensor[] = header.inputs.map((input, k) => {
    if (!isObject(input)) throw errors.invalidRequest(`inputs[${k}] must be an object`);
    const { name, datatype, shape } = input;
    if (typeof name !== 'string') throw errors.invalidRequest(`inputs[${k}] has no "name"`);
    if (typeof datatype !== 'string' || !byDatatype(datatype)) throw errors.invalidTensor(`input ${JSON.stringify(name)}: datatype ${JSON.stringify(datatype)} is not a KServe datatype`);
    if (!Array.isArray(shape) || !shape.every((d) => typeof d === 'number' && Number.isInteger(d) && d >= 0)) {
      throw errors.invalidTensor(`input ${JSON.stringify(name)}: shape must be an array of whole numbers, not ${JSON.stringify(shape)}`);
    }
    const parameters = toParameters(input.parameters, `input ${JSON.stringify(name)}`);
    const size = isObject(input.parameters) ? input.parameters.binary_data_size : undefined;
    const dims = shape as number[];
    if (size !== undefined) {
      if (typeof size !== 'number' || !Number.isInteger(size) || size < 0) throw errors.invalidRequest(`input ${JSON.stringify(name)}: binary_data_size must be a whole number`);
      if (binaryAt + size > body.length) {
        throw errors.invalidRequest(`input ${JSON.stringify(name)}: binary_data_size ${size} runs past the body (${body.length - binaryAt} bytes of binary data left)`);
      }
      raw.push(body.subarray(binaryAt, binaryAt + size));
      binaryAt += size;
      delete parameters.binary_data_size;
    } else if (input.data !== undefined) {
      raw.push(Buffer.from(jsonData(name, datatype as Datatype, dims, input.data).buffer));
    } else if (!parameters.shared_memory_region) {
      throw errors.invalidTensor(`input ${JSON.stringify(name)} has no "data", no binary_data_size and no shared_memory_region`);
    }
    return { name, datatype, shape: dims.map(String), parameters, contents: null };
  });
  if (binaryAt !== body.length) throw errors.invalidRequest(`${body.length - binaryAt} bytes of binary data follow the inputs that no input's binary_data_size claims`);
  const outputs = header.outputs === undefined ? [] : header.outputs;
  if (!Array.isArray(outputs)) throw errors.invalidRequest('"outputs" must be an array');
  return {
    model_name: model,
    model_version: version,
    id: typeof header.id === 'string' ? header.id : '',
    parameters: toParameters(header.parameters, 'the request'),
    inputs,
    outputs: outputs.map((o, k) => {
      if (!isObject(o) || typeof o.name !== 'string') throw errors.invalidRequest(`outputs[${k}] must be an object with a "name"`);
      return { name: o.name, parameters: toParameters(o.parameters, `output ${JSON.stringify(o.name)}`) };
    }),
    raw_input_contents: raw,
  };
}

/** The JSON `data` of an output's bytes. */
function outputData(datatype: string, bytes: Buffer): Json[] {
  const info = byDatatype(datatype);
  if (!info) return [];
  if (datatype === 'BYTES') return (splitBytesElements(bytes) ?? []).map((e) => new TextDecoder().decode(e));
  if (datatype === 'FP16' || datatype === 'BF16') return [];
  const Typed = info.typedArray as unknown as { new (b: ArrayBufferLike, offset: number, length: number): ArrayLike<number | bigint> };
  // A typed view needs its offset aligned for the type: an output at an odd place (rare) is copied first.
  // copy: a misaligned output into memory aligned for its typed view
  const aligned = bytes.byteOffset % info.elementBytes === 0 ? bytes : new Uint8Array(bytes);
  const view = new Typed(aligned.buffer, aligned.byteOffset, aligned.byteLength / info.elementBytes);
  const out: Json[] = [];
  for (let i = 0; i < view.length; i++) {
    const v = view[i];
    out.push(datatype === 'BOOL' ? v !== 0 : typeof v === 'bigint' ? Number(v) : v);
  }
  return out;
}

/**
 * The response as a REST body: JSON alone, or (some output binary) the JSON header followed by the
 * outputs' bytes, with the header's length for Inference-Header-Content-Length.
 */
export function restInferResponse(request: ModelInferRequest, response: ModelInferResponse): { body: Buffer; headerBytes?: number } {
  const allBinary = request.parameters.binary_data_output?.bool_param === true;
  const chunks: Buffer[] = [];
  const outputs = response.outputs.map((o, i) => {
    const asked = request.outputs.find((r) => r.name === o.name);
    const bytes = response.raw_output_contents[i] ?? Buffer.alloc(0);
    const base: JsonObject = { name: o.name, datatype: o.datatype, shape: o.shape.map(Number) };
    if (asked?.parameters.shared_memory_region) return { ...base, parameters: fromParameters(asked.parameters) };
    const binary = asked?.parameters.binary_data?.bool_param ?? allBinary;
    // FP16 and BF16 have no JSON form: binary whatever was asked.
    if (binary || o.datatype === 'FP16' || o.datatype === 'BF16') {
      chunks.push(bytes);
      return { ...base, parameters: { binary_data_size: bytes.length } };
    }
    return { ...base, data: outputData(o.datatype, bytes) };
  });
  const header = Buffer.from(JSON.stringify({ model_name: response.model_name, model_version: response.model_version, ...(response.id ? { id: response.id } : {}), outputs }));
  if (chunks.length === 0) return { body: header };
  // copy: the JSON header and the binary outputs joined into the body (the table's REST binary row)
  return { body: Buffer.concat([header, ...chunks]), headerBytes: header.length };
}

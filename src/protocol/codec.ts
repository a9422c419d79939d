/**
 * The gRPC inference messages to and from the data plane (shared/data-plane.ts): a decoded
 * ModelInferRequest into the protocol-free request the request path takes, and the outputs of a model
 * with a postprocess hook into a ModelInferResponse for protobufjs (every other answer is framed
 * around the outputs in the frame the device wrote them into: infer-response-wire.ts).
 *
 * What is gRPC's is settled here: which raw_input_contents entry is which input's, typed
 * `contents` converted into bytes, parameters from their protobuf oneofs into the values
 * parameters.ts reads for both protocols (sequence, priority, timeout, Triton's shared_memory_*
 * ones, classification). Names, datatypes, shapes and sizes against the model are
 * the request path's (shared/request-check.ts), for every protocol alike.
 *
 * The copies a request's bytes go through, end to end, are tabled at the top of
 * shared/request-path.ts; this file makes the typed contents' conversion.
 */
import { byDatatype, DATATYPES, type DtypeInfo } from '../shared/dtypes.js';
import { errors, quote, quoteShape } from '../shared/errors.js';
import { MODEL_VERSION } from '../shared/constants.js';
import type { WireTensor } from '../shared/channels/inference.js';
import { refusedLater, type DataPlaneRequest, type RequestInput } from '../shared/data-plane.js';
import { noParameters, requestedOutput, requestParameters, sharedMemoryRef, type ParameterValues } from './parameters.js';
import { joinBytesElements } from '../shared/bytes-elements.js';
import type { InferInputTensor, InferTensorContents, ModelInferRequest, ModelInferResponse, Parameters } from './types.js';

const q = quote;

const NO_PARAMETERS: ParameterValues = Object.freeze(noParameters());

/** InferParameter's oneof. */
const PARAMETER_CHOICES = ['bool_param', 'int64_param', 'string_param', 'double_param', 'uint64_param'] as const;

/**
 * A message's parameters as the data plane reads them (parameters.ts): int64 and uint64 (decimal
 * strings from proto-loader, every digit kept) as bigint; a parameter without a value as null.
 */
export function parameterValues(params: Parameters): ParameterValues {
  // Most messages carry none: one frozen empty set for all of them.
  let any = false;
  for (const _ in params) {
    any = true;
    break;
  }
  if (!any) return NO_PARAMETERS;
  const values = noParameters();
  for (const [key, p] of Object.entries(params)) {
    // proto-loader names the oneof's field; a message built by hand may only set the field.
    const choice = p.parameter_choice ?? PARAMETER_CHOICES.find((c) => p[c] !== undefined);
    values[key] = !choice ? null : choice === 'int64_param' || choice === 'uint64_param' ? BigInt(p[choice] as string) : p[choice] as boolean | number | string;
  }
  return values;
}

function parseShape(input: InferInputTensor): number[] {
  return input.shape.map((s) => {
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < 0) {
      throw errors.invalidTensor(`input ${q(input.name)}: shape ${quoteShape(input.shape)} has an invalid dimension ${String(s).slice(0, 40)}: each must be a whole number from 0 to 2^53-1`);
    }
    return n;
  });
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
  const values = (contents[info.contentsField] ?? []) as unknown[];
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
 * A ModelInferRequest as the data plane's request. `owned`: the message's bytes are views of an
 * ArrayBuffer that belongs to it alone (proto.ts), so its raw inputs may be handed over
 * as they are. A fault in its tensors or parameters is answered once its model is found (refusedLater).
 */
export function fromModelInferRequest(req: ModelInferRequest, owned: boolean): DataPlaneRequest {
  try {
    return decodeModelInferRequest(req, owned);
  } catch (err) {
    return refusedLater({ model: req.model_name, version: req.model_version, id: req.id }, err);
  }
}

function decodeModelInferRequest(req: ModelInferRequest, owned: boolean): DataPlaneRequest {
  const read = requestParameters(parameterValues(req.parameters));
  const regions = req.inputs.map((input) => sharedMemoryRef('input', input.name, parameterValues(input.parameters)));
  // raw_input_contents holds one entry per input that is not in shared memory, in input order.
  let inline = 0;
  const rawIndex = regions.map((r) => (r ? -1 : inline++));
  const useRaw = req.raw_input_contents.length > 0;
  if (useRaw && req.raw_input_contents.length !== inline) {
    throw errors.invalidRequest(`raw_input_contents has ${req.raw_input_contents.length} entries for ${inline} inputs not in shared memory; send one entry per such input, in the order of inputs`);
  }
  const inputs = req.inputs.map((input, i): RequestInput => {
    const shape = parseShape(input);
    const { name, datatype } = input;
    const hasContents = input.contents !== null
      && Object.values(input.contents).some((v) => Array.isArray(v) && v.length > 0);
    const region = regions[i];
    if (region) {
      if (hasContents) throw errors.invalidRequest(`input ${q(name)} sets contents and shared_memory_region; use one or the other`);
      return { name, datatype, shape, bytes: region };
    }
    if (useRaw) {
      if (hasContents) throw errors.invalidRequest(`input ${q(name)} sets contents while the request uses raw_input_contents; use one or the other`);
      return { name, datatype, shape, bytes: { kind: 'inline', data: req.raw_input_contents[rawIndex[i]], owned } };
    }
    // Typed values are converted by their datatype as the client named it; the request path checks it is the model's.
    const info = byDatatype(datatype);
    if (!info) throw errors.invalidTensor(`input ${q(name)}: unknown datatype ${q(datatype)}; KServe datatypes are ${DATATYPES.join(', ')}`);
    const elements = shape.reduce((a, b) => a * b, 1);
    if (!hasContents && elements > 0) {
      throw errors.invalidTensor(`input ${q(name)} has no data: send it in raw_input_contents or contents.${info.contentsField ?? 'raw'}`);
    }
    return { name, datatype, shape, bytes: { kind: 'inline', data: fromContents(name, info, input.contents ?? ({} as InferTensorContents), elements), owned: true } };
  });
  return {
    model: req.model_name,
    version: req.model_version,
    id: req.id,
    inputs,
    outputs: req.outputs.map((o) => requestedOutput(o.name, parameterValues(o.parameters))),
    // As REST's decoder does: whatever requestParameters reads, spread, never listed field by field.
    ...read,
  };
}

/**
 * Outputs into a response object, for protobufjs to encode: the answers of models with a
 * postprocess hook (their outputs come from the hook pool). Others are framed around the outputs
 * in the frame the device wrote them into (infer-response-wire.ts). Raw bytes are wrapped, not copied
 * (protobufjs copies while encoding). An output written to shared memory keeps its place with an
 * empty entry, because clients find an output's raw contents by its position among the outputs.
 */
export function inferResponse(model: string, id: string, outputs: readonly WireTensor[]): ModelInferResponse {
  return {
    model_name: model,
    model_version: MODEL_VERSION,
    id,
    outputs: outputs.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape })),
    raw_output_contents: outputs.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
  };
}

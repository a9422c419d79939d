/**
 * The manifest parser: `manifest.yaml` (the seeds' format_version "2.0") into
 * a ModelSpec. Checks everything that can be checked without ONNX Runtime:
 * the YAML's shape (a JSON Schema), axis strings against `dims`, the batch
 * axis, and which executable files the bundle holds. The check against the
 * ONNX graph itself is `signature.ts`, run where the session is created.
 *
 * Every error names the bundle, the file and what is wrong.
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { Ajv } from 'ajv';
import YAML from 'yaml';
import { byManifestDtype, MANIFEST_DTYPES } from '../shared/dtypes.js';
import { errors } from '../shared/errors.js';
import { describeSchemaErrors } from '../shared/schema-errors.js';
import { checkBundleFile, MAX_HOOK_FILE_BYTES, MAX_MANIFEST_BYTES, MAX_MODEL_FILE_BYTES, readBundleFile } from './bundle-file.js';
import type { ExecutableFile, ModelSpec, TensorSpec } from '../shared/model-spec.js';

export const MANIFEST_FILE = 'manifest.yaml';
const DEFAULT_BATCH_AXIS = 'n';

const tensorSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['name', 'dtype', 'shape'],
  properties: {
    name: { type: 'string', minLength: 1 },
    dtype: { enum: MANIFEST_DTYPES },
    // One lower-case letter per axis, in ONNX order; the batch axis letter marks the batch dimension.
    shape: { type: 'string', pattern: '^[a-z]*$' },
    dims: { type: 'object', additionalProperties: { type: 'integer', minimum: 1 } },
  },
} as const;

const manifestSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['format_version'],
  properties: {
    format_version: { const: '2.0' },
    name: { type: 'string' },
    kind: { enum: ['model', 'meta'] },
    // A meta model's sub-models: the only models its run hook may call.
    models: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string', minLength: 1 } },
    executable_inputs: { type: 'array', minItems: 1, items: tensorSchema },
    executable_outputs: { type: 'array', minItems: 1, items: tensorSchema },
    client_inputs: { type: 'array', items: tensorSchema },
    client_outputs: { type: 'array', items: tensorSchema },
    batching: {
      type: 'object',
      additionalProperties: false,
      properties: {
        compiled_batch_sizes: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'integer', minimum: 1 } },
        batch_axis: { type: 'string', pattern: '^[a-z]$' },
      },
    },
  },
} as const;

const ajv = new Ajv({ allErrors: true, strict: true, verbose: true });
const validateManifest = ajv.compile(manifestSchema);

interface RawTensor { name: string; dtype: string; shape: string; dims?: Record<string, number> }
interface RawManifest {
  format_version: '2.0';
  name?: string;
  kind?: 'model' | 'meta';
  models?: string[];
  executable_inputs?: RawTensor[];
  executable_outputs?: RawTensor[];
  client_inputs?: RawTensor[];
  client_outputs?: RawTensor[];
  batching?: { compiled_batch_sizes?: number[]; batch_axis?: string };
}

function parseTensor(bundle: string, where: string, raw: RawTensor, batchAxis: string): TensorSpec {
  const fail = (msg: string) => errors.bundleInvalid(bundle, MANIFEST_FILE, `${where} ${JSON.stringify(raw.name)}: ${msg}`);
  const letters = [...raw.shape];
  const dup = letters.find((l, i) => letters.indexOf(l) !== i);
  if (dup) throw fail(`shape ${JSON.stringify(raw.shape)} names axis '${dup}' twice`);
  const dims = raw.dims ?? {};
  for (const key of Object.keys(dims)) {
    if (key === batchAxis) throw fail(`dims sets the batch axis '${batchAxis}'; the batch axis takes its size from each request`);
    if (!letters.includes(key)) throw fail(`dims names axis '${key}', which is not in shape ${JSON.stringify(raw.shape)}`);
  }
  const shape = letters.map((l) => {
    if (l === batchAxis) return -1;
    const d = dims[l];
    if (d === undefined) throw fail(`axis '${l}' of shape ${JSON.stringify(raw.shape)} has no size in dims`);
    return d;
  });
  const info = byManifestDtype(raw.dtype);
  if (!info) throw fail(`unknown dtype ${JSON.stringify(raw.dtype)}`); // unreachable: the schema checked it
  return { name: raw.name, datatype: info.datatype, axes: raw.shape, shape, batchDim: letters.indexOf(batchAxis) };
}

function checkUniqueNames(bundle: string, where: string, tensors: readonly TensorSpec[]): void {
  const seen = new Set<string>();
  for (const t of tensors) {
    if (seen.has(t.name)) throw errors.bundleInvalid(bundle, MANIFEST_FILE, `${where} names tensor ${JSON.stringify(t.name)} twice`);
    seen.add(t.name);
  }
}

/** Which executables the bundle directory holds: model.onnx, or model.bN.onnx per compiled size. */
function findExecutables(bundle: string, dir: string, batched: boolean, sizes: readonly number[]): ExecutableFile[] {
  const files = readdirSync(dir);
  const perSize = new Map<number, string>();
  for (const f of files) {
    const m = /^model\.b(\d+)\.onnx$/.exec(f);
    if (m) perSize.set(Number(m[1]), f);
  }
  const hasDynamic = files.includes('model.onnx');
  if (hasDynamic && perSize.size > 0) {
    throw errors.bundleInvalid(bundle, 'model.onnx', `the bundle holds both model.onnx and ${[...perSize.values()].join(', ')}; keep either one model.onnx with a dynamic batch axis or one model.bN.onnx per compiled batch size`);
  }
  if (hasDynamic) return [{ batchSize: null, path: path.join(dir, 'model.onnx') }];
  if (perSize.size === 0) {
    throw errors.bundleInvalid(bundle, dir, `no executable: expected model.onnx${batched ? ' or model.bN.onnx for each compiled batch size' : ''}`);
  }
  if (!batched) {
    throw errors.bundleInvalid(bundle, [...perSize.values()][0], 'per-batch-size files need a batch axis in the manifest; an unbatched model ships model.onnx');
  }
  for (const [size, f] of perSize) {
    if (!sizes.includes(size)) {
      throw errors.bundleInvalid(bundle, f, `batch size ${size} is not in batching.compiled_batch_sizes [${sizes.join(', ')}]`);
    }
  }
  return sizes.map((size) => {
    const f = perSize.get(size);
    if (!f) throw errors.bundleInvalid(bundle, dir, `batching.compiled_batch_sizes lists ${size}, but model.b${size}.onnx is missing`);
    return { batchSize: size, path: path.join(dir, f) };
  });
}

/** Parse a manifest's text for the bundle in `dir` (whose directory name is the model name). */
export function parseManifest(text: string, dir: string): ModelSpec {
  const bundle = path.basename(dir);
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err) {
    throw errors.bundleInvalid(bundle, MANIFEST_FILE, `not valid YAML: ${(err as Error).message}`);
  }
  if (!validateManifest(doc)) {
    const hint = (doc as { format_version?: unknown })?.format_version === 2
      ? ' (write format_version: "2.0" with quotes: unquoted, YAML reads the number 2)' : '';
    throw errors.bundleInvalid(bundle, MANIFEST_FILE,
      `${describeSchemaErrors(validateManifest.errors ?? [], doc).replace(/\n/g, '; ')}${hint}`);
  }
  const raw = doc as unknown as RawManifest;
  if (raw.name !== undefined && raw.name !== bundle) {
    throw errors.bundleInvalid(bundle, MANIFEST_FILE, `name ${JSON.stringify(raw.name)} differs from the bundle's directory name ${JSON.stringify(bundle)}; the directory name is the model name`);
  }
  const batchAxis = raw.batching?.batch_axis ?? DEFAULT_BATCH_AXIS;
  if (raw.kind === 'meta') return parseMeta(bundle, dir, raw, batchAxis);
  if (raw.models) throw errors.bundleInvalid(bundle, MANIFEST_FILE, 'models lists the sub-models of a kind: meta bundle; this bundle is not one');
  for (const key of ['executable_inputs', 'executable_outputs'] as const) {
    if (!raw[key]?.length) throw errors.bundleInvalid(bundle, MANIFEST_FILE, `${key} is required (at least one tensor) for a model; only kind: meta bundles have none`);
  }
  const inputs = (raw.executable_inputs as RawTensor[]).map((t) => parseTensor(bundle, 'executable_inputs', t, batchAxis));
  const outputs = (raw.executable_outputs as RawTensor[]).map((t) => parseTensor(bundle, 'executable_outputs', t, batchAxis));
  checkUniqueNames(bundle, 'executable_inputs', inputs);
  checkUniqueNames(bundle, 'executable_outputs', outputs);
  // What clients see; model.js hooks convert between these and the executable's tensors (the
  // repository checks at load that the hooks a bundle declares tensors for exist).
  const clientInputs = raw.client_inputs?.map((t) => parseTensor(bundle, 'client_inputs', t, batchAxis)) ?? inputs;
  const clientOutputs = raw.client_outputs?.map((t) => parseTensor(bundle, 'client_outputs', t, batchAxis)) ?? outputs;
  checkUniqueNames(bundle, 'client_inputs', clientInputs);
  checkUniqueNames(bundle, 'client_outputs', clientOutputs);

  const all = [...inputs, ...outputs, ...clientInputs, ...clientOutputs];
  const batchedCount = all.filter((t) => t.batchDim >= 0).length;
  if (batchedCount !== 0 && batchedCount !== all.length) {
    const missing = all.filter((t) => t.batchDim < 0).map((t) => t.name);
    throw errors.bundleInvalid(bundle, MANIFEST_FILE, `batch axis '${batchAxis}' is missing from ${missing.join(', ')}; either every tensor has the batch axis or none does`);
  }
  const batched = batchedCount > 0;
  const sizes = [...(raw.batching?.compiled_batch_sizes ?? [])].sort((a, b) => a - b);
  if (batched && sizes.length === 0) {
    throw errors.bundleInvalid(bundle, MANIFEST_FILE, `tensors have the batch axis '${batchAxis}', so batching.compiled_batch_sizes is required (e.g. [1, 8])`);
  }
  if (!batched && sizes.length > 0) {
    throw errors.bundleInvalid(bundle, MANIFEST_FILE, `batching.compiled_batch_sizes is set, but no tensor has the batch axis '${batchAxis}'`);
  }
  return {
    name: bundle,
    dir,
    inputs,
    outputs,
    clientInputs,
    clientOutputs,
    hooks: null,
    kind: 'model',
    subModels: [],
    batchAxis: batched ? batchAxis : null,
    compiledBatchSizes: sizes,
    maxBatchSize: batched ? sizes[sizes.length - 1] : 0,
    executables: findExecutables(bundle, dir, batched, sizes),
  };
}

/**
 * A kind: meta bundle: client tensors and the sub-models its model.js `run` hook may call; no
 * executable of its own, so nothing to compile or batch (its sub-calls are batched where they run).
 */
function parseMeta(bundle: string, dir: string, raw: RawManifest, batchAxis: string): ModelSpec {
  const fail = (msg: string) => errors.bundleInvalid(bundle, MANIFEST_FILE, msg);
  if (raw.executable_inputs || raw.executable_outputs || raw.batching?.compiled_batch_sizes) {
    throw fail('a kind: meta bundle has no executable: drop executable_inputs, executable_outputs and compiled_batch_sizes');
  }
  if (!raw.client_inputs?.length || !raw.client_outputs?.length) throw fail('a kind: meta bundle declares its client_inputs and client_outputs');
  if (!raw.models) throw fail('a kind: meta bundle lists the sub-models its run hook may call under models');
  if (raw.models.includes(bundle)) throw fail(`models lists ${JSON.stringify(bundle)} itself; a meta model may not call itself`);
  const clientInputs = raw.client_inputs.map((t) => parseTensor(bundle, 'client_inputs', t, batchAxis));
  const clientOutputs = raw.client_outputs.map((t) => parseTensor(bundle, 'client_outputs', t, batchAxis));
  checkUniqueNames(bundle, 'client_inputs', clientInputs);
  checkUniqueNames(bundle, 'client_outputs', clientOutputs);
  if (!existsSync(path.join(dir, 'model.js'))) throw errors.bundleInvalid(bundle, 'model.js', 'a kind: meta bundle needs model.js with a run hook');
  const batched = clientInputs.some((t) => t.batchDim >= 0);
  return {
    name: bundle, dir, inputs: [], outputs: [], clientInputs, clientOutputs, hooks: null,
    kind: 'meta', subModels: raw.models, batchAxis: batched ? batchAxis : null,
    compiledBatchSizes: [], maxBatchSize: 0, executables: [],
  };
}

export function readManifest(dir: string): ModelSpec {
  const spec = parseManifest(readBundleFile(dir, MANIFEST_FILE, MAX_MANIFEST_BYTES).toString('utf8'), dir);
  // Checked now, on the thread that scans, so that no reader later meets a FIFO, a device or a
  // link out of the bundle (bundle-file.ts): each refuses this bundle alone.
  for (const e of spec.executables) checkBundleFile(dir, path.basename(e.path), MAX_MODEL_FILE_BYTES);
  if (existsSync(path.join(dir, 'model.js'))) checkBundleFile(dir, 'model.js', MAX_HOOK_FILE_BYTES);
  return spec;
}

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
import { splitBytesElements } from '../shared/bytes-elements.js';
import { byManifestDtype, dtypeInfo, MANIFEST_DTYPES } from '../shared/dtypes.js';
import { BundleInvalidError, errors, type BundleProblem } from '../shared/errors.js';
import { describeSchemaErrors } from '../shared/schema-errors.js';
import { checkBundleFile, MAX_HOOK_FILE_BYTES, MAX_MANIFEST_BYTES, MAX_MODEL_FILE_BYTES, MAX_WARMUP_FILE_BYTES, readBundleFile } from './bundle-file.js';
import type { ExecutableFile, ModelSpec, TensorSpec } from '../shared/model-spec.js';
import { MAX_PRIORITY_LEVELS } from '../shared/constants.js';

export const MANIFEST_FILE = 'manifest.yaml';
/** Where a bundle keeps its warm-up data (warmup.data names files in it). */
export const WARMUP_DIR = 'warmup';
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
    // Data to warm up on instead of zeros: per executable input, a file in the bundle's warmup/
    // directory (a change there reloads the model, as any bundle file does) holding one batch row
    // (the whole tensor when unbatched), raw little-endian values of its dtype (BYTES: each element
    // a 4-byte little-endian length, then its bytes), e.g. { image: warmup/image.bin }.
    warmup: {
      type: 'object',
      additionalProperties: false,
      properties: {
        data: { type: 'object', minProperties: 1, additionalProperties: { type: 'string', pattern: '^warmup/[^/]+$' } },
      },
    },
    // How its requests are scheduled: `priority`, the level of those that name none (1 the highest).
    // The node file's scheduler.models.<name>.priority wins over it; a node with fewer
    // scheduler.priority_levels refuses to load the bundle.
    scheduling: {
      type: 'object',
      additionalProperties: false,
      properties: {
        priority: { type: 'integer', minimum: 1, maximum: MAX_PRIORITY_LEVELS },
      },
    },
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
  warmup?: { data?: Record<string, string> };
  scheduling?: { priority?: number };
}

/** Every problem found in one bundle; parsing goes on past each so that all are reported at once. */
class Problems {
  readonly list: BundleProblem[] = [];

  constructor(readonly bundle: string) {}

  add(file: string, message: string): void {
    this.list.push({ file, message });
  }

  /** Throw STOWAGE_BUNDLE_INVALID naming every problem so far, if there is one. */
  check(): void {
    if (this.list.length) throw new BundleInvalidError(this.bundle, this.list);
  }
}

function parseTensor(problems: Problems, where: string, raw: RawTensor, batchAxis: string): TensorSpec | null {
  const before = problems.list.length;
  const fail = (msg: string) => problems.add(MANIFEST_FILE, `${where} ${JSON.stringify(raw.name)}: ${msg}`);
  const letters = [...raw.shape];
  const dup = letters.find((l, i) => letters.indexOf(l) !== i);
  if (dup) fail(`shape ${JSON.stringify(raw.shape)} names axis '${dup}' twice; give each axis its own letter`);
  const dims = raw.dims ?? {};
  for (const key of Object.keys(dims)) {
    if (key === batchAxis) fail(`dims sets the batch axis '${batchAxis}'; the batch axis takes its size from each request: drop ${key} from dims`);
    else if (!letters.includes(key)) fail(`dims names axis '${key}', which is not in shape ${JSON.stringify(raw.shape)}: drop it or add the axis to shape`);
  }
  const shape = letters.map((l) => {
    if (l === batchAxis) return -1;
    const d = dims[l];
    if (d === undefined) fail(`axis '${l}' of shape ${JSON.stringify(raw.shape)} has no size in dims: add ${l}: SIZE to dims`);
    return d ?? 0;
  });
  const info = byManifestDtype(raw.dtype);
  if (!info) fail(`unknown dtype ${JSON.stringify(raw.dtype)}`); // unreachable: the schema checked it
  if (!info || problems.list.length > before) return null;
  return { name: raw.name, datatype: info.datatype, axes: raw.shape, shape, batchDim: letters.indexOf(batchAxis) };
}

/** The tensors of one manifest list; those with problems are left out (and reported). */
function parseTensors(problems: Problems, where: string, raw: readonly RawTensor[], batchAxis: string): TensorSpec[] {
  const seen = new Set<string>();
  for (const t of raw) {
    if (seen.has(t.name)) problems.add(MANIFEST_FILE, `${where} names tensor ${JSON.stringify(t.name)} twice; tensor names are unique per list`);
    seen.add(t.name);
  }
  return raw.map((t) => parseTensor(problems, where, t, batchAxis)).filter((t): t is TensorSpec => t !== null);
}

/** Which executables the bundle directory holds: model.onnx, or model.bN.onnx per compiled size. */
function findExecutables(problems: Problems, dir: string, batched: boolean, sizes: readonly number[]): ExecutableFile[] {
  const files = readdirSync(dir);
  const perSize = new Map<number, string>();
  for (const f of files) {
    const m = /^model\.b(\d+)\.onnx$/.exec(f);
    if (m) perSize.set(Number(m[1]), f);
  }
  const hasDynamic = files.includes('model.onnx');
  if (hasDynamic && perSize.size > 0) {
    problems.add('model.onnx', `the bundle holds both model.onnx and ${[...perSize.values()].join(', ')}; keep either one model.onnx with a dynamic batch axis or one model.bN.onnx per compiled batch size`);
    return [];
  }
  if (hasDynamic) return [{ batchSize: null, path: path.join(dir, 'model.onnx') }];
  if (perSize.size === 0) {
    problems.add(dir, `no executable: expected model.onnx${batched ? ' or model.bN.onnx for each compiled batch size' : ''}`);
    return [];
  }
  if (!batched) {
    problems.add([...perSize.values()][0], 'per-batch-size files need a batch axis in the manifest; an unbatched model ships model.onnx');
    return [];
  }
  for (const [size, f] of perSize) {
    if (!sizes.includes(size)) problems.add(f, `batch size ${size} is not in batching.compiled_batch_sizes [${sizes.join(', ')}]: add it there or remove the file`);
  }
  const missing = sizes.filter((size) => !perSize.has(size));
  for (const size of missing) problems.add(dir, `batching.compiled_batch_sizes lists ${size}, but model.b${size}.onnx is missing`);
  return missing.length ? [] : sizes.map((size) => ({ batchSize: size, path: path.join(dir, perSize.get(size)!) }));
}

/**
 * The warm-up data the manifest names (`warmup.data`): each file read (a bundle file, checked as
 * the others are) and its size checked against one batch row of its input.
 */
function readWarmupData(problems: Problems, dir: string, files: Readonly<Record<string, string>>, inputs: readonly TensorSpec[]): Record<string, Uint8Array> {
  const data: Record<string, Uint8Array> = {};
  for (const [name, file] of Object.entries(files)) {
    const where = `warmup.data.${name}`;
    const input = inputs.find((t) => t.name === name);
    if (!input) {
      problems.add(MANIFEST_FILE, `${where}: ${JSON.stringify(name)} is not an executable input (executable_inputs: ${inputs.map((t) => t.name).join(', ')})`);
      continue;
    }
    let bytes: Buffer;
    try {
      bytes = readBundleFile(dir, file, MAX_WARMUP_FILE_BYTES);
    } catch (err) {
      const e = err as BundleInvalidError;
      problems.add(file, e.problems?.[0]?.message ?? e.message);
      continue;
    }
    const elements = input.shape.reduce((n, d, i) => (i === input.batchDim ? n : n * d), 1);
    const row = input.batchDim >= 0 ? 'one batch row' : 'the whole tensor';
    const dims = input.shape.filter((_, i) => i !== input.batchDim).join('x') || 'a scalar';
    if (input.datatype === 'BYTES') {
      // A row of strings repeats by concatenation only when the batch axis comes first.
      if (input.batchDim > 0) problems.add(MANIFEST_FILE, `${where}: BYTES warm-up data needs the batch axis first; ${name}'s is axis ${input.batchDim} of ${JSON.stringify(input.axes)}`);
      const count = splitBytesElements(bytes)?.length ?? null;
      if (count !== elements) problems.add(file, `holds ${count === null ? 'a length prefix that runs past the end' : `${count} strings`}; ${row} of ${name} (BYTES, ${dims}) is ${elements}, each a 4-byte little-endian length and its bytes`);
    } else {
      const expected = elements * dtypeInfo(input.datatype).elementBytes;
      if (bytes.length !== expected) problems.add(file, `holds ${bytes.length} bytes; ${row} of ${name} (${input.datatype}, ${dims}) is ${expected} bytes of raw little-endian values`);
    }
    data[name] = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
  }
  return data;
}

/**
 * Parse a manifest's text for the bundle in `dir` (whose directory name is the model name).
 * Throws one BundleInvalidError listing every problem found.
 */
export function parseManifest(text: string, dir: string): ModelSpec {
  const bundle = path.basename(dir);
  const problems = new Problems(bundle);
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err) {
    throw errors.bundleInvalid(bundle, MANIFEST_FILE, `not valid YAML: ${(err as Error).message}`);
  }
  if (!validateManifest(doc)) {
    const hint = (doc as { format_version?: unknown })?.format_version === 2
      ? ' (write format_version: "2.0" with quotes: unquoted, YAML reads the number 2)' : '';
    const lines = describeSchemaErrors(validateManifest.errors ?? [], doc).split('\n').map((l) => l.trim()).filter(Boolean);
    for (const [i, line] of lines.entries()) problems.add(MANIFEST_FILE, `${line}${i === lines.length - 1 ? hint : ''}`);
    problems.check();
  }
  const raw = doc as unknown as RawManifest;
  if (raw.name !== undefined && raw.name !== bundle) {
    problems.add(MANIFEST_FILE, `name ${JSON.stringify(raw.name)} differs from the bundle's directory name ${JSON.stringify(bundle)}; the directory name is the model name: rename one or drop name`);
  }
  const batchAxis = raw.batching?.batch_axis ?? DEFAULT_BATCH_AXIS;
  if (raw.kind === 'meta') return parseMeta(problems, dir, raw, batchAxis);
  if (raw.models) problems.add(MANIFEST_FILE, 'models lists the sub-models of a kind: meta bundle; this bundle is not one: drop models or set kind: meta');
  for (const key of ['executable_inputs', 'executable_outputs'] as const) {
    if (!raw[key]?.length) problems.add(MANIFEST_FILE, `${key} is required (at least one tensor) for a model; only kind: meta bundles have none`);
  }
  const inputs = parseTensors(problems, 'executable_inputs', raw.executable_inputs ?? [], batchAxis);
  const outputs = parseTensors(problems, 'executable_outputs', raw.executable_outputs ?? [], batchAxis);
  // What clients see; model.js hooks convert between these and the executable's tensors (the
  // repository checks at load that the hooks a bundle declares tensors for exist).
  const clientInputs = raw.client_inputs ? parseTensors(problems, 'client_inputs', raw.client_inputs, batchAxis) : inputs;
  const clientOutputs = raw.client_outputs ? parseTensors(problems, 'client_outputs', raw.client_outputs, batchAxis) : outputs;

  const all = [...inputs, ...outputs, ...clientInputs, ...clientOutputs];
  const batchedCount = all.filter((t) => t.batchDim >= 0).length;
  if (batchedCount !== 0 && batchedCount !== all.length) {
    const missing = [...new Set(all.filter((t) => t.batchDim < 0).map((t) => t.name))];
    problems.add(MANIFEST_FILE, `batch axis '${batchAxis}' is missing from ${missing.join(', ')}; either every tensor has the batch axis or none does`);
  }
  const batched = batchedCount > 0;
  const sizes = [...(raw.batching?.compiled_batch_sizes ?? [])].sort((a, b) => a - b);
  if (batched && sizes.length === 0) {
    problems.add(MANIFEST_FILE, `tensors have the batch axis '${batchAxis}', so batching.compiled_batch_sizes is required (e.g. [1, 8])`);
  }
  if (!batched && sizes.length > 0) {
    problems.add(MANIFEST_FILE, `batching.compiled_batch_sizes is set, but no tensor has the batch axis '${batchAxis}': drop it, or give the tensors a batch axis (batching.batch_axis names its letter)`);
  }
  const executables = findExecutables(problems, dir, batched, sizes);
  const warmupData = raw.warmup?.data ? readWarmupData(problems, dir, raw.warmup.data, inputs) : {};
  problems.check();
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
    executables,
    warmupData,
    ...priorityOf(raw),
  };
}

/** The manifest's default priority level, where it gives one. */
function priorityOf(raw: RawManifest): { priority?: number } {
  return raw.scheduling?.priority === undefined ? {} : { priority: raw.scheduling.priority };
}

/**
 * A kind: meta bundle: client tensors and the sub-models its model.js `run` hook may call; no
 * executable of its own, so nothing to compile or batch (its sub-calls are batched where they run).
 */
function parseMeta(problems: Problems, dir: string, raw: RawManifest, batchAxis: string): ModelSpec {
  const bundle = problems.bundle;
  const fail = (msg: string) => problems.add(MANIFEST_FILE, msg);
  if (raw.executable_inputs || raw.executable_outputs || raw.batching?.compiled_batch_sizes || raw.warmup) {
    fail('a kind: meta bundle has no executable: drop executable_inputs, executable_outputs, compiled_batch_sizes and warmup');
  }
  if (!raw.client_inputs?.length || !raw.client_outputs?.length) fail('a kind: meta bundle declares its client_inputs and client_outputs');
  if (!raw.models) fail('a kind: meta bundle lists the sub-models its run hook may call under models');
  else if (raw.models.includes(bundle)) fail(`models lists ${JSON.stringify(bundle)} itself; a meta model may not call itself`);
  const clientInputs = parseTensors(problems, 'client_inputs', raw.client_inputs ?? [], batchAxis);
  const clientOutputs = parseTensors(problems, 'client_outputs', raw.client_outputs ?? [], batchAxis);
  if (!existsSync(path.join(dir, 'model.js'))) problems.add('model.js', 'a kind: meta bundle needs model.js with a run hook');
  problems.check();
  const batched = clientInputs.some((t) => t.batchDim >= 0);
  return {
    name: bundle, dir, inputs: [], outputs: [], clientInputs, clientOutputs, hooks: null,
    kind: 'meta', subModels: raw.models ?? [], batchAxis: batched ? batchAxis : null,
    compiledBatchSizes: [], maxBatchSize: 0, executables: [], warmupData: {}, ...priorityOf(raw),
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

/**
 * `node main.js bundle create|check`: from an ONNX file to a bundle the server takes, and the
 * server's own checks run on a bundle before it is deployed.
 *
 * create: reads the graph's real inputs and outputs (an ONNX Runtime session), drafts the
 *   manifest (draft.ts), writes the bundle into a hidden staging directory beside its destination
 *   (scanners and watchers skip dot-directories, so a server watching the repository never sees a
 *   half-written bundle), trial-loads it (trial.ts), and only then renames it into place.
 * check: parses the manifest reporting every problem at once, then trial-loads the bundle (and a
 *   meta bundle's sub-models) and runs it once on zeros (or its warm-up data, manifest warmup.data).
 *
 * Exit status: 0 when the bundle is good, 1 when it has problems, 2 for a wrong command line.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BundleInvalidError, StowageError } from '../shared/errors.js';
import { readGraphFile, type GraphFileTensor } from './graph-file.js';
import { draftManifest } from './draft.js';
import { MANIFEST_FILE, readManifest } from '../bundle/manifest.js';
import type { GraphTensor } from '../shared/model-spec.js';
import { trialLoad, type TrialResult } from './trial.js';

export const BUNDLE_USAGE = `usage:
  node main.js bundle create MODEL.onnx --out DIR [options]
      Make a bundle of an ONNX file: DIR is the bundle directory, whose name is the model name
      (or, with --name NAME, the repository that gets NAME/). Reads the graph's inputs and
      outputs, writes manifest.yaml and the model, loads the bundle as the server would and runs
      it once on zeros; prints what it wrote. Nothing is left in DIR unless all of that passed.
        --name NAME            the model name (default: DIR's name)
        --axes TENSOR=LETTERS  one lower-case letter per axis of TENSOR, in ONNX order, e.g.
                               --axes image=nchw; needed where the graph does not name an axis
                               (repeat for each tensor)
        --batch-axis LETTER    the batch axis letter (default n)
        --batch-sizes 1,8,32   batching.compiled_batch_sizes for a dynamic batch axis (default 1,8,32)
        --unbatched            serve a graph with no batch axis as it is
        --force                replace an existing bundle at the destination
        --verbose              show the server's warnings while the bundle loads
  node main.js bundle check DIR [--verbose]
      Run the server's checks on the bundle in DIR: its manifest (every problem at once), the
      graph against the manifest, its model.js hooks, one inference on zeros (on the bundle's
      warm-up data for the inputs its manifest's warmup.data names).
`;

class UsageError extends Error {}

const say = (line = '') => process.stdout.write(`${line}\n`);

/** A reason from the server, one problem per line (a bundle's problems are joined by "; FILE: "). */
function printReason(reason: string): void {
  for (const part of reason.split(/; (?=(?:manifest\.yaml|model(?:\.b\d+)?\.onnx|model\.js): )/)) say(`  - ${part}`);
}

function printTrial(results: readonly TrialResult[]): boolean {
  for (const r of results) {
    if (r.ok) {
      say(`${r.model}: loaded; one request of ${r.request} answered in ${r.inferMs.toFixed(1)} ms:`);
      for (const o of r.outputs) say(`  ${o.name}  ${o.datatype}  [${o.shape.join(', ')}]`);
    } else {
      say(`${r.model}: ${r.stage === 'load' ? 'the server refuses it' : `it loads, but a request of ${r.request} fails`}:`);
      printReason(r.reason);
    }
  }
  return results.every((r) => r.ok);
}

/** ONNX element types the KServe protocol or ONNX Runtime's Node binding cannot carry, by onnx.proto number. */
const UNCARRIED_TYPES: Readonly<Record<number, string>> = {
  14: 'COMPLEX64', 15: 'COMPLEX128', 16: 'BF16', 17: 'FLOAT8E4M3FN', 18: 'FLOAT8E4M3FNUZ', 19: 'FLOAT8E5M2',
  20: 'FLOAT8E5M2FNUZ', 21: 'UINT4', 22: 'INT4', 23: 'FLOAT4E2M1',
};

function uncarried(t: GraphFileTensor): string {
  const type = UNCARRIED_TYPES[t.elemType];
  return type === 'BF16'
    ? `${t.side} ${JSON.stringify(t.name)} is BF16: KServe carries it, but ONNX Runtime's Node binding cannot hold it; cast it to FP32 or FP16 in the model`
    : `${t.side} ${JSON.stringify(t.name)} is ${type}, which the KServe protocol cannot carry; cast it in the model to a type it can (FP32, FP16, FP64, INT8..INT64, UINT8..UINT64, BOOL, BYTES)`;
}

/**
 * The graph's signature, as the server's device actor sees it; what stops ONNX Runtime from loading it, said plainly.
 */
async function readGraph(file: string): Promise<{ inputs: GraphTensor[]; outputs: GraphTensor[]; denotations: Map<string, readonly string[]> }> {
  const graphFile = readGraphFile(readFileSync(file));
  // Imported here: serving never loads ONNX Runtime on the main thread.
  const ort = (await import('onnxruntime-node')).default;
  let session;
  try {
    session = await ort.InferenceSession.create(file);
  } catch (err) {
    const message = (err as Error).message.trim();
    const bad = graphFile.filter((t) => t.elemType in UNCARRIED_TYPES);
    const problems = /Unsupported data type/.test(message) && bad.length > 0 ? bad.map(uncarried)
      : [`ONNX Runtime cannot load it: ${message}${/No Op registered|Could not find an implementation|not a registered function/.test(message)
        ? ' (the node named there uses an operator this ONNX Runtime does not have: export with another opset, or replace that node)' : ''}`];
    throw new BundleInvalidError(path.basename(file), problems.map((message) => ({ file: path.basename(file), message })));
  }
  try {
    return {
      inputs: session.inputMetadata as unknown as GraphTensor[],
      outputs: session.outputMetadata as unknown as GraphTensor[],
      denotations: new Map(graphFile.map((t) => [t.name, t.denotations])),
    };
  } finally {
    await session.release();
  }
}

function parseAxes(values: readonly string[]): Record<string, string> {
  const axes: Record<string, string> = {};
  for (const v of values) {
    const at = v.lastIndexOf('=');
    if (at <= 0) throw new UsageError(`--axes ${v}: write TENSOR=LETTERS, e.g. --axes image=nchw`);
    axes[v.slice(0, at)] = v.slice(at + 1);
  }
  return axes;
}

function parseSizes(value: string | undefined): number[] | undefined {
  if (value === undefined) return undefined;
  const sizes = value.split(',').map((s) => Number(s.trim()));
  if (sizes.some((s) => !Number.isInteger(s) || s < 1)) throw new UsageError(`--batch-sizes ${value}: write positive integers separated by commas, e.g. 1,8,32`);
  return sizes;
}

const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

async function create(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      out: { type: 'string' }, name: { type: 'string' }, axes: { type: 'string', multiple: true },
      'batch-axis': { type: 'string', default: 'n' }, 'batch-sizes': { type: 'string' },
      unbatched: { type: 'boolean', default: false }, force: { type: 'boolean', default: false },
      verbose: { type: 'boolean', default: false },
    },
  });
  if (positionals.length !== 1) throw new UsageError('bundle create takes one ONNX file');
  if (!values.out) throw new UsageError('bundle create needs --out DIR (the bundle directory to write)');
  const source = path.resolve(positionals[0]);
  if (!existsSync(source) || !statSync(source).isFile()) throw new UsageError(`${positionals[0]} is not a file`);
  const batchAxis = values['batch-axis'];
  if (!/^[a-z]$/.test(batchAxis)) throw new UsageError(`--batch-axis ${batchAxis}: one lower-case letter`);
  const outDir = path.resolve(values.out);
  const name = values.name ?? path.basename(outDir);
  const dest = values.name && path.basename(outDir) !== values.name ? path.join(outDir, values.name) : outDir;
  if (!MODEL_NAME.test(name)) {
    throw new UsageError(`model name ${JSON.stringify(name)}: use letters, digits, '_', '.' and '-', starting with a letter or digit (it is the bundle's directory name and what clients ask for)`);
  }
  if (existsSync(dest) && readdirSync(dest).length > 0 && !values.force) {
    say(`${dest} already exists and is not empty; choose another --out, or pass --force to replace it`);
    return 1;
  }

  const graph = await readGraph(source);
  const draft = draftManifest(graph.inputs, graph.outputs, {
    name, source: path.basename(source), batchAxis, axes: parseAxes(values.axes ?? []), denotations: graph.denotations,
    batchSizes: parseSizes(values['batch-sizes']), unbatched: values.unbatched,
  });
  if (draft.problems.length > 0) {
    say(`${path.basename(source)}: cannot make a bundle of it yet:`);
    for (const p of draft.problems) say(`  - ${p}`);
    return 1;
  }

  const repo = path.dirname(dest);
  mkdirSync(repo, { recursive: true });
  const staging = path.join(repo, `.${name}.create-${process.pid}`);
  const staged = path.join(staging, name);
  try {
    mkdirSync(staged, { recursive: true });
    copyFileSync(source, path.join(staged, 'model.onnx'));
    writeFileSync(path.join(staged, MANIFEST_FILE), draft.text);
    say(`${path.join(dest, MANIFEST_FILE)}:`);
    say(draft.text.trimEnd().replace(/^/gm, '  '));
    const ok = printTrial(await trialLoad(staging, [name], { logLevel: values.verbose ? 'warn' : 'silent' }));
    if (!ok) {
      say(`nothing written to ${dest}`);
      return 1;
    }
    if (existsSync(dest)) rmSync(dest, { recursive: true, force: true });
    renameSync(staged, dest);
    say(`wrote ${dest} (model.onnx, ${MANIFEST_FILE}); serve it with a node file whose model_repo is ${repo}`);
    return 0;
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

async function check(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { verbose: { type: 'boolean', default: false } } });
  if (positionals.length !== 1) throw new UsageError('bundle check takes one bundle directory');
  const dir = path.resolve(positionals[0]);
  if (!existsSync(path.join(dir, MANIFEST_FILE))) {
    say(`${dir}: no ${MANIFEST_FILE}; a bundle is a directory holding manifest.yaml and model.onnx (make one with bundle create)`);
    return 1;
  }
  let spec;
  try {
    spec = readManifest(dir);
  } catch (err) {
    if (!(err instanceof BundleInvalidError)) throw err;
    say(`${path.basename(dir)}: ${err.problems.length} problem${err.problems.length === 1 ? '' : 's'}:`);
    for (const p of err.problems) say(`  - ${p.file}: ${p.message}`);
    return 1;
  }
  const models = [spec.name, ...spec.subModels];
  const ok = printTrial(await trialLoad(path.dirname(dir), models, { logLevel: values.verbose ? 'warn' : 'silent' }));
  if (ok) say(`${spec.name}: ok`);
  return ok ? 0 : 1;
}

/** Run `bundle SUBCOMMAND ...`; resolves to the exit status. */
export async function bundleCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  try {
    if (sub === 'create') return await create(rest);
    if (sub === 'check') return await check(rest);
    if (sub === '--help' || sub === '-h' || sub === undefined) {
      process.stdout.write(BUNDLE_USAGE);
      return sub === undefined ? 2 : 0;
    }
    throw new UsageError(`unknown bundle command ${JSON.stringify(sub)}`);
  } catch (err) {
    if (err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`stowage: ${(err as Error).message}\n\n${BUNDLE_USAGE}`);
      return 2;
    }
    if (err instanceof BundleInvalidError) {
      say(`${err.problems[0].file}: cannot make a bundle of it:`);
      for (const p of err.problems) say(`  - ${p.message}`);
      return 1;
    }
    if (err instanceof StowageError) {
      process.stderr.write(`stowage: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}

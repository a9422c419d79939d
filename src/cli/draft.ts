/**
 * A manifest drafted from an ONNX graph's own signature, for `bundle create`: the tensors' names
 * and dtypes as ONNX Runtime reports them, an axis letter for every dimension and a size for every
 * fixed one. Pure: the command line reads the signature from a session and writes the text.
 *
 * Where the letters come from:
 * - a symbolic dimension names its axis: a batch-like name ("batch", "batch_size", "N", ...), the
 *   batch axis letter itself, or a name shared by every tensor of the graph is the batch axis; a
 *   one-letter name is that letter;
 * - a fixed dimension has no name in ONNX, but may have a denotation: DATA_BATCH, DATA_CHANNEL (c),
 *   DATA_TIME (t), DATA_FEATURE (f), or a letter (what tools/export writes);
 * - otherwise its letter comes from `--axes TENSOR=LETTERS`;
 * - every tensor still missing a letter is one problem, with a suggested flag.
 */
import { byOrtType } from '../shared/dtypes.js';
import type { GraphTensor } from '../shared/model-spec.js';

export interface DraftOptions {
  /** The model name (the bundle directory's name). */
  readonly name: string;
  /** Where the graph came from, for the header comment. */
  readonly source: string;
  /** The batch axis letter (default "n"). */
  readonly batchAxis: string;
  /** Axis letters per tensor name, from `--axes`; these win over what the graph says. */
  readonly axes: Readonly<Record<string, string>>;
  /** compiled_batch_sizes; default DEFAULT_BATCH_SIZES for a dynamic batch axis. */
  readonly batchSizes?: readonly number[];
  /** Per tensor, each dimension's denotation in the ONNX file ('' for none): graph-file.ts. */
  readonly denotations?: ReadonlyMap<string, readonly string[]>;
  /** Serve the graph without a batch axis (every dimension fixed). */
  readonly unbatched?: boolean;
}

export interface DraftTensor {
  readonly name: string;
  readonly dtype: string;
  readonly axes: string;
  readonly dims: Readonly<Record<string, number>>;
}

export interface Draft {
  readonly inputs: readonly DraftTensor[];
  readonly outputs: readonly DraftTensor[];
  /** Empty for an unbatched model. */
  readonly batchSizes: readonly number[];
  /** The manifest.yaml text; '' when there are problems. */
  readonly text: string;
  /** What stops the draft, each naming the tensor and the fix. */
  readonly problems: readonly string[];
}

export const DEFAULT_BATCH_SIZES: readonly number[] = [1, 8, 32];

/** Names exporters give a dynamic batch dimension (torch's dynamic_axes, tf2onnx, hand-written). */
const BATCH_NAMES = new Set(['n', 'batch', 'batch_size', 'batchsize', 'bs', 'b', 'unk__batch', 'none', '?']);

/** ONNX's standard dimension denotations, as axis letters. */
const DENOTED_LETTERS: Readonly<Record<string, string>> = { DATA_CHANNEL: 'c', DATA_TIME: 't', DATA_FEATURE: 'f' };

/** Letters offered in a suggested --axes value for axes the graph does not name, in this order. */
const SUGGESTED_LETTERS = 'chwdklmopqrstuvxyzabefgij';

const isFixed = (d: number | string | undefined): d is number => typeof d === 'number' && d >= 0;
const isNamed = (d: number | string | undefined): d is string => typeof d === 'string' && d !== '';

function symbolicNames(t: GraphTensor): Set<string> {
  return new Set((t.shape ?? []).filter(isNamed));
}

/** The one symbolic name every tensor of the graph carries, if there is exactly one: the batch axis. */
function sharedSymbol(all: readonly GraphTensor[]): string | undefined {
  if (all.length < 2) return undefined;
  const [first, ...rest] = all.map(symbolicNames);
  const shared = [...first].filter((n) => rest.every((s) => s.has(n)));
  return shared.length === 1 ? shared[0] : undefined;
}

function suggest(letters: readonly (string | null)[], batchAxis: string): string {
  const used = new Set(letters.filter((l): l is string => l !== null));
  used.add(batchAxis);
  const pool = [...SUGGESTED_LETTERS].filter((l) => !used.has(l));
  return letters.map((l) => l ?? pool.shift() ?? '?').join('');
}

function draftTensor(t: GraphTensor, side: 'input' | 'output', o: DraftOptions, batchSymbol: string | undefined,
  problems: string[]): DraftTensor | null {
  const what = `${side} ${JSON.stringify(t.name)}`;
  const before = problems.length;
  if (!t.isTensor || !t.type) {
    problems.push(`${what} is not a tensor (a sequence or a map); the KServe protocol carries tensors only: return a tensor from the graph`);
    return null;
  }
  const info = byOrtType(t.type);
  if (!info) {
    problems.push(`${what} has element type ${t.type}, which the KServe protocol cannot carry; cast it in the model to one it can (FP32, FP16, FP64, INT8..INT64, UINT8..UINT64, BOOL, BYTES)`);
  }
  const shape = t.shape ?? [];
  const shown = `[${shape.map((d) => (isFixed(d) ? d : isNamed(d) ? d : '?')).join(', ')}]`;
  const given = o.axes[t.name];
  let letters: (string | null)[];
  if (given !== undefined) {
    if (!/^[a-z]*$/.test(given) || given.length !== shape.length) {
      problems.push(`--axes ${t.name}=${given}: ${what} has ${shape.length} axes ${shown}; give one lower-case letter per axis`);
      return null;
    }
    letters = [...given];
  } else {
    const denoted = o.denotations?.get(t.name) ?? [];
    letters = shape.map((d, i) => {
      const den = denoted[i] ?? '';
      if (!o.unbatched && (den === 'DATA_BATCH' || (isNamed(d) && (d === batchSymbol || d === o.batchAxis || BATCH_NAMES.has(d.toLowerCase()))))) return o.batchAxis;
      if (isNamed(d) && /^[a-zA-Z]$/.test(d)) return d.toLowerCase();
      if (/^[a-z]$/.test(den)) return den;
      return DENOTED_LETTERS[den] ?? null;
    });
  }
  const dims: Record<string, number> = {};
  letters.forEach((l, i) => {
    const d = shape[i];
    if (l === null) return;
    if (l === o.batchAxis) {
      if (o.unbatched) problems.push(`--axes ${t.name}=${given}: '${l}' is the batch axis letter, and --unbatched serves the model without one; use another letter`);
      return;
    }
    if (isFixed(d)) dims[l] = d;
    else {
      problems.push(`${what} ${shown}: axis ${i} (${isNamed(d) ? JSON.stringify(d) : 'unnamed'}) has no fixed size and is not the batch axis; Stowage serves fixed sizes beyond the batch axis: export the model with a fixed size there${o.unbatched ? '' : `, or mark it the batch axis with --axes ${t.name}=${suggest(letters.map((x, j) => (j === i ? o.batchAxis : x === o.batchAxis ? null : x)), o.batchAxis)}`}`);
    }
  });
  if (letters.includes(null)) {
    const unnamed = letters.flatMap((l, i) => (l === null ? [i] : []));
    problems.push(`${what} ${shown}: the graph does not name axis ${unnamed.join(', ')}; give the tensor's axis letters with --axes ${t.name}=${suggest(letters, o.unbatched ? '' : o.batchAxis)} (one lower-case letter per axis${o.unbatched ? '' : `, '${o.batchAxis}' for the batch axis`})`);
  } else {
    const dup = letters.find((l, i) => letters.indexOf(l) !== i);
    if (dup) problems.push(`${what} ${shown}: axis letter '${dup}' is used twice; give each axis its own letter with --axes ${t.name}=LETTERS`);
  }
  if (problems.length > before || !info) return null;
  return { name: t.name, dtype: info.manifest, axes: letters.join(''), dims };
}

/** The batch sizes a graph allows: a dynamic batch axis takes the asked sizes; a fixed one, its own size only. */
function batchSizesOf(tensors: readonly DraftTensor[], graph: readonly GraphTensor[], o: DraftOptions, problems: string[]): number[] {
  const fixed = new Set<number>();
  for (const t of tensors) {
    const g = graph.find((x) => x.name === t.name);
    const d = g?.shape?.[t.axes.indexOf(o.batchAxis)];
    if (isFixed(d)) fixed.add(d);
  }
  if (fixed.size === 0) {
    const sizes = [...(o.batchSizes ?? DEFAULT_BATCH_SIZES)].sort((a, b) => a - b);
    if (sizes.length === 0 || sizes.some((s) => !Number.isInteger(s) || s < 1) || new Set(sizes).size !== sizes.length) {
      problems.push(`--batch-sizes ${sizes.join(',')}: give distinct positive integers, e.g. --batch-sizes 1,8,32`);
    }
    return sizes;
  }
  if (fixed.size > 1 || tensors.some((t) => !isFixed(graph.find((x) => x.name === t.name)?.shape?.[t.axes.indexOf(o.batchAxis)]))) {
    problems.push(`the batch axis '${o.batchAxis}' is fixed to ${[...fixed].join(' and ')} in some tensors and dynamic or different in others; export the model with one dynamic batch axis on every tensor`);
    return [];
  }
  const [size] = fixed;
  if (o.batchSizes && (o.batchSizes.length !== 1 || o.batchSizes[0] !== size)) {
    problems.push(`--batch-sizes ${o.batchSizes.join(',')}: the graph fixes the batch axis '${o.batchAxis}' to ${size}, so it runs batches of ${size} only; export it with a dynamic batch axis for other sizes`);
  }
  return [size];
}

function tensorLine(t: DraftTensor): string {
  const dims = Object.entries(t.dims).map(([l, d]) => `${l}: ${d}`).join(', ');
  return `  - { name: ${JSON.stringify(t.name)}, dtype: ${t.dtype}, shape: "${t.axes}"${dims ? `, dims: { ${dims} }` : ''} }`;
}

/** Draft the manifest of a graph whose inputs and outputs ONNX Runtime reported. */
export function draftManifest(inputs: readonly GraphTensor[], outputs: readonly GraphTensor[], o: DraftOptions): Draft {
  const problems: string[] = [];
  const all = [...inputs, ...outputs];
  for (const name of Object.keys(o.axes)) {
    if (!all.some((t) => t.name === name)) problems.push(`--axes ${name}=...: the graph has no tensor ${JSON.stringify(name)}; its tensors are ${all.map((t) => JSON.stringify(t.name)).join(', ')}`);
  }
  const inputNames = new Set(inputs.map((t) => t.name));
  for (const t of outputs) {
    if (inputNames.has(t.name)) problems.push(`input and output are both named ${JSON.stringify(t.name)}; a request's inputs and a response's outputs are matched by name, so rename one in the model`);
  }
  const noBatch = `the graph has no batch axis: no tensor has a dynamic dimension named as one. Export it with a dynamic batch axis (torch.onnx.export(..., dynamic_axes={"input": {0: "n"}, ...})), name a fixed axis the batch axis with --axes TENSOR=${o.batchAxis}..., or serve it unbatched with --unbatched`;
  const dynamic = all.some((t) => (t.shape ?? []).some((d) => !isFixed(d)) || o.denotations?.get(t.name)?.includes('DATA_BATCH'));
  const flagged = Object.values(o.axes).some((letters) => letters.includes(o.batchAxis));
  if (!o.unbatched && !dynamic && !flagged) return { inputs: [], outputs: [], batchSizes: [], text: '', problems: [...problems, noBatch] };
  const batchSymbol = o.unbatched ? undefined : sharedSymbol(all);
  const di = inputs.map((t) => draftTensor(t, 'input', o, batchSymbol, problems));
  const dout = outputs.map((t) => draftTensor(t, 'output', o, batchSymbol, problems));
  const tensors = [...di, ...dout].filter((t): t is DraftTensor => t !== null);
  let batchSizes: number[] = [];
  if (problems.length === 0) {
    const batched = tensors.filter((t) => t.axes.includes(o.batchAxis));
    if (!o.unbatched && batched.length === 0) {
      problems.push(noBatch);
    } else if (batched.length > 0 && batched.length < tensors.length) {
      const missing = tensors.filter((t) => !t.axes.includes(o.batchAxis)).map((t) => JSON.stringify(t.name));
      problems.push(`${missing.join(', ')} ${missing.length === 1 ? 'has' : 'have'} no batch axis '${o.batchAxis}' while the other tensors do; Stowage batches every tensor or none: export the model with the batch axis on every input and output, or give it with --axes`);
    } else if (batched.length > 0) {
      batchSizes = batchSizesOf(tensors, all, o, problems);
    }
  }
  if (problems.length > 0) return { inputs: [], outputs: [], batchSizes: [], text: '', problems };
  const lines = [
    `# Written by \`node main.js bundle create\` from ${o.source}; edit freely, then \`bundle check\`.`,
    'format_version: "2.0"',
    `name: ${JSON.stringify(o.name)}`,
    'executable_inputs:',
    ...di.map((t) => tensorLine(t!)),
    'executable_outputs:',
    ...dout.map((t) => tensorLine(t!)),
  ];
  if (batchSizes.length > 0) {
    lines.push('batching:', `  compiled_batch_sizes: [${batchSizes.join(', ')}]`);
    if (o.batchAxis !== 'n') lines.push(`  batch_axis: ${o.batchAxis}`);
  }
  return { inputs: di as DraftTensor[], outputs: dout as DraftTensor[], batchSizes, text: `${lines.join('\n')}\n`, problems };
}

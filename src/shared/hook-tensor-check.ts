/**
 * The tensors a hook returned, checked against what must come next and put in that order: the
 * executable's inputs after preprocess (on the hook thread that feeds the device), the client
 * outputs after postprocess and a meta model's run (on the main thread). Pure: both threads use it.
 */
import { errors, quote as q, quoteShape as fmtShape } from './errors.js';
import type { TensorSpec } from './model-spec.js';
import type { WireTensor } from './channels/inference.js';

/**
 * The tensors a hook returned, checked against what must come next (the executable's inputs after
 * preprocess, the client outputs after postprocess) and put in that order. Every mismatch fails
 * the request with a message saying what was expected.
 */
export function checkHookTensors(model: string, hook: string, tensors: readonly WireTensor[], specs: readonly TensorSpec[],
  batchSize: number): WireTensor[] {
  const checked = orderHookTensors(tensors, specs, batchSize);
  if (typeof checked === 'string') throw errors.hookFailed(model, hook, checked);
  return checked;
}

/**
 * checkHookTensors without the error: the tensors in `specs`' order, or what is wrong with them.
 * A hook thread feeding the device directly runs it there (actors/hooks/worker.ts), where a
 * failure is a result, not an exception.
 */
export function orderHookTensors(tensors: readonly WireTensor[], specs: readonly TensorSpec[], batchSize: number): WireTensor[] | string {
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const missing = specs.filter((s) => !byName.has(s.name)).map((s) => q(s.name));
  if (missing.length) return `it returned ${tensors.map((t) => q(t.name)).join(', ') || 'no tensors'}; expected ${specs.map((s) => q(s.name)).join(', ')} (missing ${missing.join(', ')})`;
  const ordered: WireTensor[] = [];
  for (const s of specs) {
    const t = byName.get(s.name) as WireTensor;
    if (t.datatype !== s.datatype) return `tensor ${q(s.name)}: expected datatype ${s.datatype}, got ${t.datatype}`;
    const shapeOk = t.shape.length === s.shape.length
      && t.shape.every((d, i) => (i === s.batchDim ? d === batchSize : d === s.shape[i]));
    if (!shapeOk) {
      const want = s.shape.map((d, i) => (i === s.batchDim ? batchSize : d));
      return `tensor ${q(s.name)}: expected shape ${fmtShape(want)} (axes ${q(s.axes)}), got ${fmtShape(t.shape)}`;
    }
    ordered.push(t);
  }
  return ordered;
}


/**
 * The check of a manifest against an ONNX graph's real signature, as ONNX
 * Runtime reports it: names, dtypes, ranks and fixed dimensions. Pure: the
 * device actor calls it with the session's metadata, the tests call it with
 * hand-written metadata.
 */
import path from 'node:path';
import { byOrtType, dtypeInfo } from '../shared/dtypes.js';
import { BundleInvalidError } from '../shared/errors.js';
import type { ExecutableFile, GraphTensor, ModelSpec, TensorSpec } from '../shared/model-spec.js';

function checkSide(spec: ModelSpec, file: ExecutableFile, side: 'input' | 'output',
  declared: readonly TensorSpec[], graph: readonly GraphTensor[]): string[] {
  const problems: string[] = [];
  const key = side === 'input' ? 'executable_inputs' : 'executable_outputs';
  const byName = new Map(graph.map((g) => [g.name, g]));
  for (const t of declared) {
    const g = byName.get(t.name);
    if (!g) {
      problems.push(`${key} names ${JSON.stringify(t.name)}, but the graph's ${side}s are ${graph.map((x) => JSON.stringify(x.name)).join(', ')}`);
      continue;
    }
    if (!g.isTensor || !g.type) {
      problems.push(`${side} ${JSON.stringify(t.name)} is not a tensor in the graph`);
      continue;
    }
    const info = dtypeInfo(t.datatype);
    if (info.ortType === null) {
      problems.push(`${side} ${JSON.stringify(t.name)}: dtype ${info.manifest} cannot be fed to ONNX Runtime's Node binding`);
      continue;
    }
    if (g.type !== info.ortType) {
      const graphDtype = byOrtType(g.type)?.manifest ?? g.type;
      problems.push(`${side} ${JSON.stringify(t.name)}: manifest dtype ${info.manifest}, graph dtype ${graphDtype}: set dtype: ${graphDtype} in ${key}`);
      continue;
    }
    const shape = g.shape ?? [];
    if (shape.length !== t.shape.length) {
      problems.push(`${side} ${JSON.stringify(t.name)}: manifest shape ${JSON.stringify(t.axes)} has rank ${t.shape.length}, graph shape [${shape.join(', ')}] has rank ${shape.length}: give shape one letter per axis of the graph`);
      continue;
    }
    shape.forEach((gd, i) => {
      const fixed = typeof gd === 'number' && gd >= 0;
      const axis = t.axes[i];
      if (i === t.batchDim) {
        if (file.batchSize === null && fixed && !(spec.compiledBatchSizes.length === 1 && spec.compiledBatchSizes[0] === gd)) {
          problems.push(`${side} ${JSON.stringify(t.name)}: the graph fixes batch axis '${axis}' to ${gd}, but compiled_batch_sizes is [${spec.compiledBatchSizes.join(', ')}]; export model.onnx with a dynamic batch axis or ship one model.bN.onnx per size`);
        } else if (file.batchSize !== null && fixed && gd !== file.batchSize) {
          problems.push(`${side} ${JSON.stringify(t.name)}: batch axis '${axis}' is ${gd} in the graph, expected ${file.batchSize}`);
        }
      } else if (fixed && gd !== t.shape[i]) {
        problems.push(`${side} ${JSON.stringify(t.name)}: axis '${axis}' is ${t.shape[i]} in the manifest, ${gd} in the graph: set ${axis}: ${gd} in its dims`);
      }
    });
  }
  if (side === 'input') {
    const declaredNames = new Set(declared.map((t) => t.name));
    const extra = graph.filter((g) => !declaredNames.has(g.name)).map((g) => JSON.stringify(g.name));
    if (extra.length) problems.push(`the graph has inputs ${extra.join(', ')} that ${key} does not declare: declare them there (a request must feed every graph input)`);
  }
  return problems;
}

/** Throws STOWAGE_BUNDLE_INVALID listing every mismatch between the manifest and one ONNX file, one problem each. */
export function checkSignature(spec: ModelSpec, file: ExecutableFile,
  inputs: readonly GraphTensor[], outputs: readonly GraphTensor[]): void {
  const problems = [
    ...checkSide(spec, file, 'input', spec.inputs, inputs),
    ...checkSide(spec, file, 'output', spec.outputs, outputs),
  ];
  if (problems.length) {
    const onnxFile = path.basename(file.path);
    throw new BundleInvalidError(spec.name, problems.map((p) => ({ file: onnxFile, message: `does not match manifest.yaml: ${p}` })));
  }
}

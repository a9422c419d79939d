/**
 * What the metadata RPCs say about a model, synthesised from its manifest:
 * KServe's ModelMetadata and Triton's ModelConfig.
 *
 * Triton's convention decides `max_batch_size`: when it is > 0 the batch is
 * the implicit leading dimension, left out of ModelConfig dims (and shown as
 * -1 in ModelMetadata shapes, which perf_analyzer strips). A model whose batch
 * axis is not leading in every tensor cannot say that, so it reports
 * max_batch_size 0 and keeps -1 at the batch axis in its dims.
 */
import type { ModelSpec, TensorSpec } from '../shared/model-spec.js';
import { MODEL_BACKEND, MODEL_PLATFORM, MODEL_VERSION } from '../shared/constants.js';
import { dtypeInfo } from '../shared/dtypes.js';

function metadataTensor(t: TensorSpec) {
  return { name: t.name, datatype: t.datatype, shape: [...t.shape] };
}

/** A meta model reads to Triton clients like an ensemble: a model made of other models. */
const platformOf = (spec: ModelSpec) => (spec.kind === 'meta' ? 'ensemble' : MODEL_PLATFORM);

export function modelMetadata(spec: ModelSpec) {
  return {
    name: spec.name,
    versions: [MODEL_VERSION],
    platform: platformOf(spec),
    inputs: spec.clientInputs.map(metadataTensor),
    outputs: spec.clientOutputs.map(metadataTensor),
  };
}

/** True when Triton's implicit-leading-batch convention describes the model. */
export function leadingBatch(spec: ModelSpec): boolean {
  return spec.maxBatchSize > 0 && [...spec.clientInputs, ...spec.clientOutputs].every((t) => t.batchDim === 0);
}

/** Priority levels as the scheduler serves them (scheduler.priority_levels, and the model's default level). */
export interface ConfigPriorities {
  levels: number;
  defaultLevel: number;
}

/**
 * `maxBatchRows`: the most rows the scheduler coalesces into one execution of this model (the
 * largest compiled size, capped by scheduler.models.<name>.max_batch_size). Above 1, requests are
 * coalesced, and the config says so with a dynamic_batching section, which perf_analyzer reads,
 * with the priority levels as Triton's dynamic batcher reports them (`priority_levels`,
 * `default_priority_level`), which clients read to know what `priority` may say.
 */
export function modelConfig(spec: ModelSpec, maxBatchRows: number = spec.maxBatchSize, priorities?: ConfigPriorities) {
  const implicit = leadingBatch(spec);
  const dims = (t: TensorSpec) => (implicit ? t.shape.slice(1) : [...t.shape]);
  // A tensor that is only the batch axis has no per-sample dims; Triton writes that as dims [1] reshaped to [].
  const shapeOf = (t: TensorSpec) => (dims(t).length === 0 ? { dims: [1], reshape: { shape: [] } } : { dims: dims(t) });
  return {
    name: spec.name,
    platform: platformOf(spec),
    backend: spec.kind === 'meta' ? '' : MODEL_BACKEND,
    version_policy: { latest: { num_versions: 1 } },
    max_batch_size: implicit ? spec.maxBatchSize : 0,
    input: spec.clientInputs.map((t) => ({ name: t.name, data_type: dtypeInfo(t.datatype).tritonType, format: 'FORMAT_NONE', ...shapeOf(t) })),
    output: spec.clientOutputs.map((t) => ({ name: t.name, data_type: dtypeInfo(t.datatype).tritonType, ...shapeOf(t) })),
    instance_group: [{ name: `${spec.name}_0`, kind: 'KIND_CPU', count: 1 }],
    default_model_filename: spec.executables.length === 1 && spec.executables[0].batchSize === null ? 'model.onnx' : '',
    model_transaction_policy: { decoupled: false },
    ...(spec.batchAxis !== null && maxBatchRows > 1
      ? {
        dynamic_batching: {
          preferred_batch_size: spec.compiledBatchSizes.filter((s) => s <= maxBatchRows), max_queue_delay_microseconds: 0,
          ...(priorities ? { priority_levels: priorities.levels, default_priority_level: priorities.defaultLevel } : {}),
        },
      }
      : {}),
  };
}

// ModelSpecs for unit tests, written as partial objects: what a test does not set gets the value
// of a plain model without hooks whose client tensors are its executable's.

/** @typedef {import('../../dist/shared/model-spec.js').ModelSpec} ModelSpec */
/** @typedef {import('../../dist/shared/model-spec.js').TensorSpec} TensorSpec */

/**
 * @param {Partial<ModelSpec>} fields
 * @returns {ModelSpec}
 */
export function modelSpec(fields) {
  const inputs = fields.inputs ?? [];
  const outputs = fields.outputs ?? [];
  return {
    name: 'm',
    dir: '/nowhere',
    hooks: null,
    kind: 'model',
    subModels: [],
    batchAxis: null,
    compiledBatchSizes: [],
    maxBatchSize: 0,
    executables: [],
    warmupData: {},
    ...fields,
    inputs,
    outputs,
    clientInputs: fields.clientInputs ?? inputs,
    clientOutputs: fields.clientOutputs ?? outputs,
  };
}

/**
 * @param {string} name
 * @param {TensorSpec['datatype']} datatype
 * @param {string} axes
 * @param {number[]} shape
 * @param {number} batchDim
 * @returns {TensorSpec}
 */
export function tensorSpec(name, datatype, axes, shape, batchDim) {
  return { name, datatype, axes, shape, batchDim };
}

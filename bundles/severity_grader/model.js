// The model emits CORAL ordinal-regression logits, one per boundary "grade > k". The grade is the
// number of consecutive leading logits above zero, stopping at the first that is not. That early
// break is awkward to express as a static graph, but it is a plain loop here, next to the model.

/**
 * @param {{ logits: { datatype: 'FP32', shape: number[], data: Float32Array } }} outputs
 * @returns {{ grade: { datatype: 'INT64', shape: number[], data: BigInt64Array } }}
 */
export function postprocess({ logits }) {
  const [rows, boundaries] = logits.shape;
  const grade = new BigInt64Array(rows);
  for (let r = 0; r < rows; r++) {
    let n = 0;
    for (let k = 0; k < boundaries; k++) {
      if (logits.data[r * boundaries + k] > 0) n = k + 1;
      else break;
    }
    grade[r] = BigInt(n);
  }
  return { grade: { datatype: 'INT64', shape: [rows, 1], data: grade } };
}

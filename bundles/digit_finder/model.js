// Find the digits on a canvas, then read them: two models with data-dependent JavaScript between.
// Stage one (digit_cells) measures the ink in each 8x8 cell; the cells with a digit are cut out
// and read together in one call to the classifier (none when the canvas is blank).

const CELLS = 4;
const SIZE = 8 * CELLS;
const INK = 0.5; // mean ink (of 16) above which a cell holds a digit

export async function run({ canvas }, ctx) {
  const { ink } = await ctx.infer('digit_cells', { canvas: { datatype: 'FP32', shape: [1, SIZE, SIZE], data: canvas.data } });
  const cells = [];
  for (let cell = 0; cell < CELLS * CELLS; cell++) if (ink.data[cell] > INK) cells.push(cell);

  const crops = new Float32Array(cells.length * 64);
  cells.forEach((cell, k) => {
    const top = 8 * Math.floor(cell / CELLS);
    const left = 8 * (cell % CELLS);
    for (let y = 0; y < 8; y++) crops.set(canvas.data.subarray((top + y) * SIZE + left, (top + y) * SIZE + left + 8), k * 64 + y * 8);
  });
  const labels = cells.length
    ? (await ctx.infer('digits', { image: { datatype: 'FP32', shape: [cells.length, 8, 8], data: crops } }, { outputs: ['label'] })).label.data
    : new BigInt64Array(0);

  const boxes = new BigInt64Array(16 * 4).fill(-1n);
  const digits = new BigInt64Array(16).fill(-1n);
  cells.forEach((cell, k) => {
    const top = 8 * Math.floor(cell / CELLS);
    const left = 8 * (cell % CELLS);
    boxes.set([top, left, top + 8, left + 8].map(BigInt), k * 4);
    digits[k] = labels[k];
  });
  return {
    count: { datatype: 'INT64', shape: [1], data: [BigInt(cells.length)] },
    boxes: { datatype: 'INT64', shape: [16, 4], data: boxes },
    digits: { datatype: 'INT64', shape: [16], data: digits },
  };
}

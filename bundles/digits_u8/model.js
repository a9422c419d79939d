// Raw 8-bit grey levels (0..255, as a camera or scanner gives them) become the 0..16 intensities
// the digit classifier was trained on.

const SCALE = 16 / 255;

/**
 * @param {{ image: { datatype: 'UINT8', shape: number[], data: Uint8Array } }} inputs
 * @returns {{ image: { datatype: 'FP32', shape: number[], data: Float32Array } }}
 */
export function preprocess({ image }) {
  const scaled = new Float32Array(image.data.length);
  for (let i = 0; i < scaled.length; i++) scaled[i] = image.data[i] * SCALE;
  return { image: { datatype: 'FP32', shape: image.shape, data: scaled } };
}

/**
 * The I/O contract of a built component (ComponentIO: every input, output and state with shape,
 * dtype and role; the mask rule; the argmax pick) lives in ir's chain.ts so that runtimes read it
 * without depending on the converter. Re-exported here, with the converter's vocabulary split.
 */
import type { LmHeadPiece } from "@anemll-qwen35/ir/chain";

export {
  argmaxToken,
  type ComponentIO,
  type ComponentKind,
  decodeMask,
  type GraphDType,
  type IoDType,
  type IoRole,
  type IoTensor,
  type KvPlacement,
  type LmHeadPiece,
  type MaskRule,
} from "@anemll-qwen35/ir/chain";

/**
 * Splits `vocab` rows into the fewest pieces of at most `maxRows` rows, as even as possible, in
 * multiples of `unit` rows when `unit` divides the vocabulary (e.g. 248320 rows, 16384 max,
 * unit 8 → 16 × 15520).
 */
export function planLmHeadPieces(vocab: number, maxRows: number, unit = 1): LmHeadPiece[] {
  const u = unit > 1 && vocab % unit === 0 && unit <= maxRows ? unit : 1;
  const units = vocab / u;
  let k = Math.ceil(vocab / maxRows);
  while (Math.ceil(units / k) * u > maxRows) k++;
  const per = Math.floor(units / k);
  const extra = units % k;
  const pieces: LmHeadPiece[] = [];
  let offset = 0;
  for (let i = 0; i < k; i++) {
    const rows = (per + (i < extra ? 1 : 0)) * u;
    pieces.push({ rowOffset: offset, rows });
    offset += rows;
  }
  return pieces;
}

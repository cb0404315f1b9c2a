/**
 * Splitting a dimension wider than the ANE takes into pieces (the lm_head's vocabulary, wide MLPs).
 * The I/O contract of a built component (ComponentIO: every input, output and state with shape,
 * dtype and role) lives in ir's chain so that runtimes read it without depending on the converter.
 */
import type { LmHeadPiece } from "@anemll-qwen35/ir/chain";

/**
 * Splits `total` rows (or channels) into the fewest pieces of at most `maxRows`, as even as
 * possible, in multiples of `unit` when `unit` divides the total (e.g. a 248320-row vocabulary,
 * 16384 max, unit 8 → 16 × 15520; Qwen3.5-27B's 17408 MLP channels → 2 × 8704).
 */
export function planPieces(total: number, maxRows: number, unit = 1): LmHeadPiece[] {
  const u = unit > 1 && total % unit === 0 && unit <= maxRows ? unit : 1;
  const units = total / u;
  let k = Math.ceil(total / maxRows);
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

/**
 * How each weight role is stored in a package: plain (the graph dtype), a k-means LUT
 * (iOS18 `constexpr_lut_to_dense`, grouped by output channels as ANEMLL does) or linear int8
 * (iOS18 `constexpr_blockwise_shift_scale`). Roles: `body` = the super-block projections,
 * `lmHead` = the vocabulary projection, `embed` = the embedding table.
 */
import type { LutBits } from "../palettize.js";
import { GraphOptionError } from "./errors.js";

export type WeightQuant =
  | { readonly kind: "none" }
  /** groupSize: output channels sharing one LUT (default QuantOptions.groupSize, 8); perTensor: one LUT. */
  | {
      readonly kind: "lut";
      readonly bits: LutBits;
      readonly groupSize?: number;
      readonly perTensor?: boolean;
    }
  /** blockSize: input values sharing one scale (default: the whole row, i.e. per output channel). */
  | { readonly kind: "int8"; readonly blockSize?: number };

export type WeightRole = "body" | "lmHead" | "embed";

export interface QuantOptions {
  readonly body?: WeightQuant;
  readonly lmHead?: WeightQuant;
  readonly embed?: WeightQuant;
  /** Default LUT group size for roles whose LUT names none. Default 8 (ANEMLL's default). */
  readonly groupSize?: number;
}

export const NO_QUANT: WeightQuant = { kind: "none" };
export const DEFAULT_LUT_GROUP_SIZE = 8;

/**
 * Parses the short spelling used by CLIs: `none`, `lut<bits>`, `lut<bits>,<group>`,
 * `lut<bits>,per-tensor`, `int8`, `int8,<block>` (e.g. "lut4", "lut6,16", "int8").
 */
export function parseWeightQuant(text: string, field = "quant"): WeightQuant {
  const s = text.trim().toLowerCase();
  if (s === "none" || s === "fp16" || s === "fp32") return NO_QUANT;
  const lut = /^lut(\d+)(?:,(\d+|per-tensor))?$/.exec(s);
  if (lut) {
    const bits = Number(lut[1]);
    if (![2, 4, 6, 8].includes(bits))
      throw new GraphOptionError(field, `LUT bits must be 2, 4, 6 or 8, got "${text}"`);
    if (lut[2] === "per-tensor") return { kind: "lut", bits: bits as LutBits, perTensor: true };
    if (lut[2] !== undefined) {
      const g = Number(lut[2]);
      if (g < 1)
        throw new GraphOptionError(field, `LUT group size must be a positive integer, got "${text}"`);
      return { kind: "lut", bits: bits as LutBits, groupSize: g };
    }
    return { kind: "lut", bits: bits as LutBits };
  }
  const i8 = /^int8(?:,(\d+))?$/.exec(s);
  if (i8) {
    if (i8[1] === undefined) return { kind: "int8" };
    const block = Number(i8[1]);
    if (block < 1)
      throw new GraphOptionError(field, `int8 block size must be a positive integer, got "${text}"`);
    return { kind: "int8", blockSize: block };
  }
  throw new GraphOptionError(
    field,
    `expected none, lut<2|4|6|8>[,<group>|,per-tensor] or int8[,<block>], got "${text}"`,
  );
}

/** The inverse of parseWeightQuant (group size shown only when set). */
export function formatWeightQuant(q: WeightQuant): string {
  if (q.kind === "none") return "none";
  if (q.kind === "int8") return q.blockSize ? `int8,${q.blockSize}` : "int8";
  if (q.perTensor) return `lut${q.bits},per-tensor`;
  return q.groupSize ? `lut${q.bits},${q.groupSize}` : `lut${q.bits}`;
}

/**
 * fp16 emulation for the interpreter: values stay in Float32Array but are rounded to the
 * nearest fp16 value (round-to-nearest-even), with overflow to ±inf and optional flush of
 * subnormals to zero — what an fp16 datapath such as the ANE's produces at each op output.
 */

import { simdHeap } from "./kernels/simd.js";

const F16_MAX_ROUNDS_TO_INF = 0x477ff000; // |x| >= 65520 rounds to inf in fp16
const F16_MIN_NORMAL = 0x38800000; // 2^-14
const SUBNORMAL_MAGIC = 1.5 * 2 ** 28; // adding it in float64 rounds to a multiple of 2^-24 (RNE)

/** Rounds every element of `a` to fp16 precision in place; returns how many are now inf/NaN. */
export function roundF16InPlace(a: Float32Array, flushSubnormals = false): number {
  const u = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const n = a.length;
  let nonFinite = 0;
  for (let i = 0; i < n; i++) {
    const b = u[i];
    const abs = b & 0x7fffffff;
    if (abs >= F16_MAX_ROUNDS_TO_INF) {
      if (abs <= 0x7f800000) u[i] = (b & 0x80000000) | 0x7f800000; // NaN payloads stay
      nonFinite++;
    } else if (abs < F16_MIN_NORMAL) {
      if (flushSubnormals) u[i] = b & 0x80000000;
      else {
        const r = a[i] + SUBNORMAL_MAGIC - SUBNORMAL_MAGIC;
        a[i] = r === 0 && b >>> 31 ? -0 : r;
      }
    } else {
      // keep 10 mantissa bits, round to nearest even on the 13 dropped bits
      u[i] = (b + 0xfff + ((b >>> 13) & 1)) & 0xffffe000;
    }
  }
  return nonFinite;
}

/** Number of inf/NaN values in `a` (a float pass first: x·0 is NaN only for inf/NaN). */
export function countNonFinite(a: Float32Array): number {
  let probe = 0;
  for (let i = 0; i < a.length; i++) probe += a[i] * 0;
  if (probe === 0) return 0;
  const u = new Uint32Array(a.buffer, a.byteOffset, a.length);
  let c = 0;
  for (let i = 0; i < u.length; i++) if ((u[i] & 0x7f800000) === 0x7f800000) c++;
  return c;
}

/**
 * roundF16InPlace by a SIMD kernel when `a` lives in the SIMD heap (op results do), else the
 * loop above. Returns the inf/NaN count when `count`, else 0.
 */
export function roundF16Values(a: Float32Array, flushSubnormals: boolean, count: boolean): number {
  const h = simdHeap();
  const off = h?.offsetOf(a);
  if (!h || off === undefined) return roundF16InPlace(a, flushSubnormals);
  h.roundF16(off, a.length, flushSubnormals);
  return count ? countNonFinite(a) : 0;
}

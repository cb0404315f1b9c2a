/**
 * scaled_dot_product_attention (iOS18): softmax(Q·Kᵀ/√E + mask)·V.
 * Source: coremltools ops/defs/iOS18/transformers.py. q/k/v share rank (>= 3) and batch dims
 * (no GQA broadcasting: repeat K/V heads, or fold query heads into L); the mask is bool
 * (true = attend) or float (added to the scores) and broadcasts to [B..., L, S].
 */
import { gemmNT } from "../kernels/gemm.js";
import { broadcastShapes, expandTo, sameShape, shapeStr } from "../shape.js";
import { numelOf } from "../values.js";
import { tt } from "./common.js";
import type { OpArgs, OpDef } from "./opdef.js";

function check(a: OpArgs): { L: number; S: number; E: number; EV: number; batch: number[] } {
  const q = a.type("query");
  const k = a.type("key");
  const v = a.type("value");
  const r = q.shape.length;
  if (r < 3) a.fail("query", `must have rank >= 3 ([B..., L, E]), got ${shapeStr(q.shape)}`);
  if (k.shape.length !== r) a.fail("key", `must have query's rank ${r}, got ${shapeStr(k.shape)}`);
  if (v.shape.length !== r) a.fail("value", `must have query's rank ${r}, got ${shapeStr(v.shape)}`);
  const batch = q.shape.slice(0, -2);
  if (!sameShape(k.shape.slice(0, -2), batch))
    a.fail("key", `batch dims ${shapeStr(k.shape.slice(0, -2))} must equal query's ${shapeStr(batch)}`);
  if (!sameShape(v.shape.slice(0, -2), batch))
    a.fail("value", `batch dims ${shapeStr(v.shape.slice(0, -2))} must equal query's ${shapeStr(batch)}`);
  const L = q.shape[r - 2];
  const E = q.shape[r - 1];
  const S = k.shape[r - 2];
  if (k.shape[r - 1] !== E) a.fail("key", `embedding size ${k.shape[r - 1]} must equal query's ${E}`);
  if (v.shape[r - 2] !== S) a.fail("value", `sequence length ${v.shape[r - 2]} must equal key's ${S}`);
  const m = a.typeOpt("attn_mask");
  if (m) {
    if (m.shape.at(-1) !== S)
      a.fail("attn_mask", `last dim must be the key length ${S}, got ${shapeStr(m.shape)}`);
    if (!broadcastShapes(q.shape.slice(0, -1), m.shape.slice(0, -1))) {
      a.fail("attn_mask", `${shapeStr(m.shape)} does not broadcast to [${[...batch, L, S].join(", ")}]`);
    }
  }
  return { L, S, E, EV: v.shape[r - 1], batch };
}

const sdpa: OpDef = {
  type: "scaled_dot_product_attention",
  version: "iOS18",
  doc: "softmax(q·kᵀ/√E + mask)·v; a bool mask attends where true.",
  params: [
    { name: "query", dtype: "T" },
    { name: "key", dtype: "T" },
    { name: "value", dtype: "T" },
    { name: "attn_mask", dtype: "M", optional: true },
  ],
  domains: { T: ["fp16", "fp32"], M: ["bool", "fp16", "fp32"] },
  infer(a) {
    const { L, EV, batch } = check(a);
    return [tt(a.type("query").dtype, [...batch, L, EV])];
  },
  evaluate(a, out) {
    const { L, S, E, EV, batch } = check(a);
    const q = a.value("query").data as Float32Array;
    const k = a.value("key").data as Float32Array;
    const v = a.value("value").data as Float32Array;
    const B = numelOf(batch);
    let mask: Float32Array | Uint8Array | undefined;
    let isBool = false;
    if (a.has("attn_mask")) {
      const m = a.value("attn_mask");
      isBool = m.type.dtype === "bool";
      const full = [...batch, L, S];
      mask = sameShape(m.type.shape, full)
        ? (m.data as Float32Array | Uint8Array)
        : expandTo(m.data as Float32Array | Uint8Array, m.type.shape, full);
    }
    const scale = 1 / Math.sqrt(E);
    const o = new Float32Array(B * L * EV);
    const scores = new Float32Array(L * S);
    for (let b = 0; b < B; b++) {
      gemmNT(q.subarray(b * L * E, (b + 1) * L * E), k.subarray(b * S * E, (b + 1) * S * E), scores, L, S, E);
      for (let l = 0; l < L; l++) {
        const row = l * S;
        const mrow = (b * L + l) * S;
        let mx = Number.NEGATIVE_INFINITY;
        for (let s = 0; s < S; s++) {
          let x = scores[row + s] * scale;
          if (mask) x = isBool ? (mask[mrow + s] ? x : Number.NEGATIVE_INFINITY) : x + mask[mrow + s];
          scores[row + s] = x;
          if (x > mx) mx = x;
        }
        let sum = 0;
        for (let s = 0; s < S; s++) {
          const e = Math.exp(scores[row + s] - mx);
          scores[row + s] = e;
          sum += e;
        }
        // P·V as rows of V scaled and summed: contiguous inner loop over EV
        const orow = (b * L + l) * EV;
        for (let s = 0; s < S; s++) {
          const p = scores[row + s] / sum;
          if (p === 0) continue;
          const vrow = (b * S + s) * EV;
          for (let e = 0; e < EV; e++) o[orow + e] += p * v[vrow + e];
        }
        if (sum === 0 || mx === Number.NEGATIVE_INFINITY) o.fill(Number.NaN, orow, orow + EV); // fully masked row
      }
    }
    return [{ type: out[0], data: o }];
  },
};

export const ATTENTION_OPS: readonly OpDef[] = [sdpa];

/**
 * One Gated DeltaNet layer over a chunk of T tokens (the prefill function), from the conv window
 * and recurrent state before the chunk to those after its last valid token.
 *
 * Two forms of the same recurrence (gdn.ts is the one-token step):
 *   chunked: the WY (chunked delta rule) form over sub-chunks of C tokens — per head, with
 *            g the log decays, Γ = L·g (cumulative sum as a matmul by the constant lower
 *            triangle L), Γᵢ − Γⱼ formed as the segment sum Σ_{j<k≤i} g_k = L·(g ⊙ strict-lower)
 *            (never as a difference: fp16 cancellation), A = strict-lower((β⊙K)·Kᵀ ⊙ exp(Γᵢ − Γⱼ)):
 *              Tinv = (I + A)⁻¹          by block doubling (blockedInverse: ⌈log₂ C⌉ levels,
 *                                        each a sub-inverse, bounded; not the product form)
 *              U = Tinv·(β⊙V),  W = Tinv·(β⊙exp(Γ)⊙K),  V′ = U − W·S
 *              O = (exp(Γ)⊙Q)·S + ((Q·Kᵀ) ⊙ lower(exp(Γᵢ − Γⱼ)))·V′
 *              S ← exp(Γ_C)·S + (exp(Γ_C − Γ)⊙K)ᵀ·V′
 *            Triangles and decay masks are multiplies by constants (no band_part, no select, no
 *            loop); every matmul is rank 4 ([1, Hv, ·, ·]).
 *   scan:    the one-token delta rule unrolled over the T tokens (elementwise + reductions).
 *
 * A chunk may end early (a prompt's tail): `valid` is 0 for the rows after the last real token,
 * whose β and log decay are then multiplied by 0 — those rows leave S unchanged — and the host's
 * `conv_pick` selects the conv window after the last valid token.
 */
import type { MilBuilder, MilVar } from "@anemll-qwen35/ir/mil";
import { GDN_Q_SCALE, GDN_V_SCALE, scalar, siluTanh, softplusStable } from "./ane.js";
import {
  type GdnStateIn,
  type GdnStep,
  gdnConvTaps,
  gdnDecayConstants,
  gdnDims,
  gdnGatedOutput,
  gdnProjections,
  l2norm,
} from "./gdn.js";
import type { GraphWeights } from "./weights.js";

/** How the prefill function runs the delta rule over its chunk (see the module comment). */
export type GdnPrefillForm = "chunked" | "scan";
export const GDN_PREFILL_FORMS: readonly GdnPrefillForm[] = ["chunked", "scan"];
/** Tokens per WY sub-chunk (a divisor of T is used): 16 keeps (I + A)⁻¹ at 4 factors. */
export const DEFAULT_WY_CHUNK = 16;

/** What every GDN layer of a prefill chunk reads besides its own state. */
export interface GdnChunkInputs {
  /** [1, 1, T, 1]: 1 for the chunk's tokens, 0 for rows past its last one. */
  readonly valid: MilVar;
  /**
   * [1, T + K − 1, K − 1]: one-hot, picks the conv window after the last valid token (absent with
   * rowStates: the verify function keeps every row's window instead).
   */
  readonly convPick?: MilVar;
  readonly form: GdnPrefillForm;
  /**
   * The verify function: also every row's states after it (`rows` of the step; the scan form,
   * which computes them anyway).
   */
  readonly rowStates?: boolean;
  /** WY sub-chunk length (chunked form). */
  readonly wyChunk: number;
}

/** [1, H·d, 1, T] (channels-first) → [1, H, T, d] (token rows per head). */
function headsRows(w: GraphWeights, x: MilVar, heads: number, name: string): MilVar {
  const b = w.b;
  const T = x.shape[3];
  const d = x.shape[1] / heads;
  const split = b.reshape({ x, shape: [1, heads, d, T], name: `${name}_hd` });
  return b.transpose({ x: split, perm: [0, 1, 3, 2], name });
}

/** Constant [1, 1, n, n] lower triangle: 1 where j ≤ i (strict: j < i). */
function lowerTriangle(w: DeltaBuilder, n: number, strict: boolean, name: string): MilVar {
  const v = new Float32Array(n * n);
  for (let i = 0; i < n; i++) for (let j = 0; j < (strict ? i : i + 1); j++) v[i * n + j] = 1;
  return w.constant(v, [1, 1, n, n], name);
}

/** x [1, D, 1, T] (already input-normed) → the mixer output [1, D, 1, T] and the states after the chunk. */
export async function gdnChunkLayer(
  w: GraphWeights,
  layer: number,
  x: MilVar,
  state: GdnStateIn,
  chunk: GdnChunkInputs,
): Promise<GdnStep> {
  const b = w.b;
  const d = gdnDims(w, layer);
  const { convDim, keyDim, valueDim, K, Hk, Hv, dk } = d;
  const T = x.shape[3];

  const { qkv, z, b: betaLogit, a } = await gdnProjections(w, d, x); // [1, ·, 1, T]

  // causal depthwise conv over [K-1 cached columns | T tokens]: K shifted slices times their tap
  const columns = b.reshape({ x: qkv, shape: [1, convDim, T], name: "cols" });
  const window = b.concat({ values: [state.conv, columns], axis: 2, name: "window" }); // [1, convDim, T+K-1]
  const convW = await gdnConvTaps(w, d);
  let acc: MilVar | undefined;
  for (let k = 0; k < K; k++) {
    const shifted = b.sliceByIndex({
      x: window,
      begin: [0, 0, k],
      end: [1, convDim, k + T],
      name: `win${k}`,
    });
    const tap = b.sliceByIndex({ x: convW, begin: [0, 0, k], end: [1, convDim, k + 1], name: `tap${k}` });
    const term = b.mul({ x: shifted, y: tap, name: `taps${k}` });
    acc = acc ? b.add({ x: acc, y: term, name: `conv${k}` }) : term;
  }
  const mixed = siluTanh(b, acc as MilVar, "conv_act"); // [1, convDim, T]
  // the window after row j is columns j+1 … j+K-1 of [cached | chunk]
  const windowAfter = (j: number) =>
    b.sliceByIndex({ x: window, begin: [0, 0, j + 1], end: [1, convDim, j + K], name: `win_after${j}` });
  const after = chunk.rowStates ? Array.from({ length: T }, (_, j) => windowAfter(j)) : undefined;
  const convRows = after && b.concat({ values: after, axis: 0, name: "conv_rows" }); // [T, convDim, K-1]
  const convNext = chunk.convPick
    ? b.matmul({ x: window, y: chunk.convPick, name: "conv_next" }) // [1, convDim, K-1]
    : (after?.[T - 1] ?? windowAfter(T - 1));
  const [qRaw, kRaw, vRaw] = b.split({
    x: b.reshape({ x: mixed, shape: [1, convDim, 1, T], name: "mixed4" }),
    axis: 1,
    splitSizes: [keyDim, keyDim, valueDim],
    name: "split",
  });

  // q, k: per-head L2 norm over dk (q also ×1/√dk and the fp16 scale); value head j takes q/k head floor(j / r)
  const repeat = (t: MilVar, name: string) =>
    d.r === 1
      ? t
      : b.reshape({
          x: b.concat({ values: new Array<MilVar>(d.r).fill(t), axis: 2, name: `${name}_rep` }), // [1, Hk, r·T, dk]
          shape: [1, Hv, T, dk],
          name,
        });
  const q = repeat(l2norm(w, headsRows(w, qRaw, Hk, "q_heads"), GDN_Q_SCALE / Math.sqrt(dk), "q_norm"), "q"); // [1, Hv, T, dk]
  const k = repeat(l2norm(w, headsRows(w, kRaw, Hk, "k_heads"), 1, "k_norm"), "k"); // [1, Hv, T, dk]
  const vRows = headsRows(w, vRaw, Hv, "v_heads");
  const v = b.mul({ x: vRows, y: scalar(GDN_V_SCALE, vRows), name: "v" }); // [1, Hv, T, dv]

  // β and the log decay g = −exp(A_log)·softplus(a + dt_bias), per head and token [1, Hv, T, 1]; 0 past the chunk's end
  const beta = b.mul({
    x: b.reshape({
      x: b.sigmoid({ x: betaLogit, name: "beta_sig" }),
      shape: [1, Hv, T, 1],
      name: "beta_rows",
    }),
    y: chunk.valid,
    name: "beta",
  });
  const { negA, dtBias } = await gdnDecayConstants(w, d);
  const aRows = b.reshape({ x: a, shape: [1, Hv, T, 1], name: "a_rows" });
  const sp = softplusStable(b, b.add({ x: aRows, y: dtBias, name: "a_dt" }), "softplus");
  const g = b.mul({ x: b.mul({ x: negA, y: sp, name: "g_raw" }), y: chunk.valid, name: "g" }); // ≤ 0

  const run = chunk.form === "scan" || chunk.rowStates ? scanRule : wyRule;
  const { o, rec, states } = run(w, { q, k, v, beta, g, S: state.rec }, chunk.wyChunk); // o [1, Hv, T, dv] (×1024)

  // as gdn.ts, in token rows: back to channels-first for out_proj
  const out = await gdnGatedOutput(
    w,
    d,
    o,
    () => headsRows(w, z, Hv, "z_heads"), // [1, Hv, T, dv]
    (gated) => {
      const back = b.transpose({ x: gated, perm: [0, 1, 3, 2], name: "gated_hd" }); // [1, Hv, dv, T]
      return b.reshape({ x: back, shape: [1, valueDim, 1, T], name: "flat" });
    },
  ); // [1, D, 1, T]
  if (!convRows || !states) return { out, conv: convNext, rec };
  const recRows = b.concat({ values: states, axis: 0, name: "rec_rows" }); // [T, Hv, dk, dv]
  return { out, conv: convNext, rec, rows: { conv: convRows, rec: recRows } };
}

/** What the delta-rule forms build with: the builder and small constants in the graph dtype. */
export type DeltaBuilder = Pick<GraphWeights, "b" | "constant">;

/** Per head: q, k [1, Hv, T, dk], v [1, Hv, T, dv], β and g [1, Hv, T, 1], S [1, Hv, dk, dv]. */
export interface DeltaInputs {
  readonly q: MilVar;
  readonly k: MilVar;
  readonly v: MilVar;
  readonly beta: MilVar;
  readonly g: MilVar;
  readonly S: MilVar;
}

const rowsOf = (w: DeltaBuilder, x: MilVar, from: number, to: number, name: string) => {
  const [, h, , d] = x.shape;
  return w.b.sliceByIndex({ x, begin: [0, 0, from, 0], end: [1, h, to, d], name });
};

/** The chunked (WY) form over sub-chunks of `wy` tokens (the largest divisor of T not above it). */
export function wyRule(
  w: DeltaBuilder,
  x: DeltaInputs,
  wy: number,
): { o: MilVar; rec: MilVar; states?: MilVar[] } {
  const b = w.b;
  const T = x.q.shape[2];
  let C = Math.min(wy, T);
  while (T % C !== 0) C--;
  const Lincl = lowerTriangle(w, C, false, "tri_incl");
  const Lstrict = lowerTriangle(w, C, true, "tri_strict");
  const inverse = inverseConstants(w, C);
  let S = x.S;
  const outs: MilVar[] = [];
  for (let c = 0; c < T / C; c++) {
    const n = `c${c}_`;
    const [q, k, v, beta, g] = [x.q, x.k, x.v, x.beta, x.g].map((t, i) =>
      rowsOf(w, t, c * C, (c + 1) * C, `${n}${["q", "k", "v", "beta", "g"][i]}`),
    );
    // Γ = L·g (cumulative log decay) for exp(Γᵢ) ≤ 1; the decay from j to i, exp(Γᵢ − Γⱼ), from the
    // segment sums Γᵢⱼ = Σ_{j<k≤i} g_k formed directly — L·(g ⊙ strict-lower), each a sum of
    // same-sign terms (g ≤ 0) — not as a difference of two cumulative sums, which reach |1 000| in a
    // 64-token sub-chunk and cancel in fp16 (ulp 0.5 there; Mamba-2's segsum, FLA keeps it fp32)
    const G = b.matmul({ x: Lincl, y: g, name: `${n}G` }); // [1, Hv, C, 1]
    const seg = b.matmul({
      x: Lincl,
      y: b.mul({ x: g, y: Lstrict, name: `${n}g_low` }), // [k, j] = g_k for j < k
      name: `${n}seg`,
    }); // [1, Hv, C, C]: Σ_{j<k≤i} g_k, 0 on and above the diagonal (an empty sum)
    const decay = b.exp({ x: seg, name: `${n}decay` }); // ≤ 1 below the diagonal, 1 on and above
    const kb = b.mul({ x: k, y: beta, name: `${n}kb` });
    const A = b.mul({
      x: b.matmul({ x: kb, y: k, transposeY: true, name: `${n}kbk` }),
      y: b.mul({ x: decay, y: Lstrict, name: `${n}decay_strict` }),
      name: `${n}A`,
    }); // [1, Hv, C, C], strictly lower
    const Tinv = blockedInverse(b, A, inverse, n); // (I + A)⁻¹
    const eG = b.exp({ x: G, name: `${n}eG` }); // [1, Hv, C, 1], ≤ 1
    const U = b.matmul({ x: Tinv, y: b.mul({ x: v, y: beta, name: `${n}vb` }), name: `${n}U` }); // [1, Hv, C, dv]
    const W = b.matmul({ x: Tinv, y: b.mul({ x: kb, y: eG, name: `${n}kbg` }), name: `${n}W` }); // [1, Hv, C, dk]
    const Vp = b.sub({ x: U, y: b.matmul({ x: W, y: S, name: `${n}WS` }), name: `${n}Vp` }); // [1, Hv, C, dv]
    const inter = b.matmul({ x: b.mul({ x: q, y: eG, name: `${n}qg` }), y: S, name: `${n}inter` });
    const qk = b.mul({
      x: b.matmul({ x: q, y: k, transposeY: true, name: `${n}qk_raw` }),
      y: b.mul({ x: decay, y: Lincl, name: `${n}decay_incl` }),
      name: `${n}qk`,
    });
    outs.push(b.add({ x: inter, y: b.matmul({ x: qk, y: Vp, name: `${n}intra` }), name: `${n}o` }));
    // S ← exp(Γ_C)·S + (exp(Γ_C − Γ)⊙K)ᵀ·V′
    const Glast = rowsOf(w, G, C - 1, C, `${n}G_last`); // [1, Hv, 1, 1]
    const segLast = b.reshape({
      x: rowsOf(w, seg, C - 1, C, `${n}seg_last`), // [1, Hv, 1, C]: Γ_C − Γⱼ as its own segment sum
      shape: [1, seg.shape[1], C, 1],
      name: `${n}G_tail`,
    });
    const tailDecay = b.exp({ x: segLast, name: `${n}tail_decay` }); // ≤ 1
    const kd = b.mul({ x: k, y: tailDecay, name: `${n}kd` });
    S = b.add({
      x: b.mul({ x: S, y: b.exp({ x: Glast, name: `${n}eG_last` }), name: `${n}S_decay` }),
      y: b.matmul({ x: kd, y: Vp, transposeX: true, name: `${n}kV` }),
      name: `${n}S`,
    }); // [1, Hv, dk, dv]
  }
  const o = outs.length === 1 ? outs[0] : b.concat({ values: outs, axis: 2, name: "o" });
  return { o, rec: S };
}

/** The identity [1, 1, C, C] and the masks Mₛ, s = 1, 2, 4 … < C, of blockedInverse. */
interface InverseConstants {
  readonly eye: MilVar;
  readonly masks: readonly MilVar[];
}

function inverseConstants(w: DeltaBuilder, C: number): InverseConstants {
  const eye = w.constant(
    Float32Array.from({ length: C * C }, (_, i) => (i % (C + 1) === 0 ? 1 : 0)),
    [1, 1, C, C],
    "eye",
  );
  const masks: MilVar[] = [];
  for (let s = 1; s < C; s *= 2) {
    const m = new Float32Array(C * C);
    for (let i = 0; i < C; i++)
      for (let j = 0; j < C; j++)
        if (Math.floor(i / (2 * s)) === Math.floor(j / (2 * s)) && i % (2 * s) >= s && j % (2 * s) < s)
          m[i * C + j] = 1;
    masks.push(w.constant(m, [1, 1, C, C], `inv_mask${s}`));
  }
  return { eye, masks };
}

/**
 * (I + A)⁻¹ of a strictly lower A [1, H, C, C] by block doubling: T₁ = I, and with Mₛ the 0/1
 * mask of the entries in the second half (rows) × first half (columns) of each 2s-block,
 *   T₂ₛ = Tₛ − Tₛ·(A ⊙ Mₛ)·Tₛ      ([[T₁₁, 0], [A₂₁, T₂₂]] ↦ [[T₁₁, 0], [−T₂₂·A₂₁·T₁₁, T₂₂]])
 * so every Tₛ is block-diagonal with the exact inverses of (I + A)'s diagonal blocks — values the
 * delta rule itself bounds — where the product (I − A)(I + A²)(I + A⁴)… has partial sums that
 * grow like binomials once keys correlate (|Aᵢⱼ| → 1): 36–210 % relative error at C 16 in fp16 on
 * repeated keys (test/gdn-wy-fp16.test.ts). ⌈log₂ C⌉ levels of 2 matmuls, masks are constants.
 */
function blockedInverse(b: MilBuilder, A: MilVar, k: InverseConstants, name: string): MilVar {
  const C = A.shape[2];
  // s = 1: T₁ = I, so T₂ = I − A ⊙ M₁ (C = 1: A is 0, the inverse I)
  const first = C === 1 ? A : b.mul({ x: A, y: k.masks[0], name: `${name}A_m1` });
  let Tinv = b.sub({ x: k.eye, y: first, name: `${name}inv2` });
  for (let s = 2, level = 1; s < C; s *= 2, level++) {
    const off = b.mul({ x: A, y: k.masks[level], name: `${name}A_m${s}` });
    const right = b.matmul({ x: off, y: Tinv, name: `${name}inv${s}_r` });
    Tinv = b.sub({
      x: Tinv,
      y: b.matmul({ x: Tinv, y: right, name: `${name}inv${s}_l` }),
      name: `${name}inv${2 * s}`,
    });
  }
  return Tinv;
}

/** The one-token delta rule (gdn.ts) unrolled over the chunk's T tokens; `states`: S after each. */
export function scanRule(w: DeltaBuilder, x: DeltaInputs): { o: MilVar; rec: MilVar; states: MilVar[] } {
  const b = w.b;
  const T = x.q.shape[2];
  let S = x.S;
  const outs: MilVar[] = [];
  const states: MilVar[] = [];
  const col = (t: MilVar, i: number, name: string) =>
    b.transpose({ x: rowsOf(w, t, i, i + 1, `${name}_row`), perm: [0, 1, 3, 2], name }); // [1, Hv, d, 1]
  for (let i = 0; i < T; i++) {
    const n = `t${i}_`;
    const k = col(x.k, i, `${n}k`);
    const q = col(x.q, i, `${n}q`);
    const v = rowsOf(w, x.v, i, i + 1, `${n}v`); // [1, Hv, 1, dv]
    const beta = rowsOf(w, x.beta, i, i + 1, `${n}beta`); // [1, Hv, 1, 1]
    const decay = b.exp({ x: rowsOf(w, x.g, i, i + 1, `${n}g`), name: `${n}decay` });
    const sDecayed = b.mul({ x: S, y: decay, name: `${n}S_decay` });
    const kv = b.reduceSum({
      x: b.mul({ x: sDecayed, y: k, name: `${n}Sk` }),
      axes: [2],
      keepDims: true,
      name: `${n}kv`,
    });
    const delta = b.mul({ x: b.sub({ x: v, y: kv, name: `${n}v_kv` }), y: beta, name: `${n}delta` });
    S = b.add({ x: sDecayed, y: b.mul({ x: k, y: delta, name: `${n}k_delta` }), name: `${n}S` });
    states.push(S);
    outs.push(
      b.reduceSum({ x: b.mul({ x: S, y: q, name: `${n}Sq` }), axes: [2], keepDims: true, name: `${n}o` }),
    );
  }
  const o = outs.length === 1 ? outs[0] : b.concat({ values: outs, axis: 2, name: "o" });
  return { o, rec: S, states };
}

/**
 * SHAPE-ACCURATE STAND-INS for a converted Qwen3.5-0.8B chain, built with MilBuilder, until the
 * converter's real packages exist (the lead swaps those in). They are NOT the converter's graphs:
 * the op sequence follows the reference math (shared/reference/qwen35-architecture.md §2) in the
 * ANE forms the references describe (ane-toolchains.md §1.7, §1.8, §4.3) — 1×1 conv projections
 * in BC1S layout, RMSNorm as layer_norm over [x, −x], tanh-form SiLU, stable softplus, delta rule
 * as mul + reduce_sum, fp16 everywhere, KV and recurrent state as Core ML states — and every
 * weight has its real 0.8B shape, LUT-palettized with grouped LUTs. Weight values are zeros and
 * never stored (a discarding BlobSink): the cost model reads shapes and dtypes only.
 *
 * Real 0.8B dims (qwen35-architecture.md §1, §3.3): hidden 1024, 24 layers as 6 DDDA super-blocks,
 * GDN in_proj_qkv 6144×1024, in_proj_z 2048×1024, in_proj_a/b 16×1024, conv1d 6144×4, out_proj
 * 1024×2048; attention q_proj 4096×1024 (query + gate), k/v_proj 512×1024, o_proj 1024×2048;
 * MLP 3584; vocab 248320 (lm_head split 16 × 15520 × 1024).
 */

import { parseQwen35Config, publishedConfigJson } from "@anemll-qwen35/ir/checkpoint";
import {
  type BlobRef,
  type BlobSink,
  MilBuilder,
  type MilData,
  type MilVar,
  type MlModel,
  type TensorType,
  tensorType,
} from "@anemll-qwen35/ir/mil";
import type { ChainComponent, ChainInput } from "../src/index.js";

export interface StandInConfig {
  readonly label: string;
  readonly hidden: number;
  readonly superBlocks: number;
  readonly gdn: {
    readonly keyHeads: number;
    readonly valueHeads: number;
    readonly headDim: number;
    readonly convKernel: number;
  };
  readonly attn: {
    readonly heads: number;
    readonly kvHeads: number;
    readonly headDim: number;
    readonly rotaryDim: number;
  };
  readonly mlp: number;
  readonly vocab: number;
  readonly headSplit: number;
  /** LUT bits of the super-block weights (default 4) and output channels per LUT (default 8). */
  readonly bodyBits: 4 | 6 | 8;
  readonly groupSize: number;
}

/** A published size's dims (from its config.json) with the chain's split and LUT choices. */
export function standInConfig(
  size: "0.8b" | "9b",
  o: Pick<StandInConfig, "headSplit" | "bodyBits" | "groupSize"> = {
    headSplit: 16,
    bodyBits: 4,
    groupSize: 8,
  },
): StandInConfig {
  const c = parseQwen35Config(publishedConfigJson(size));
  return {
    label: `qwen35-${size}`,
    hidden: c.hiddenSize,
    superBlocks: c.superBlocks.length,
    gdn: {
      keyHeads: c.linearNumKeyHeads,
      valueHeads: c.linearNumValueHeads,
      headDim: c.linearKeyHeadDim,
      convKernel: c.linearConvKernelDim,
    },
    attn: {
      heads: c.numAttentionHeads,
      kvHeads: c.numKeyValueHeads,
      headDim: c.headDim,
      rotaryDim: c.rotaryDim,
    },
    mlp: c.intermediateSize ?? 0,
    vocab: c.vocabSize,
    ...o,
  };
}

export const QWEN35_08B: StandInConfig = standInConfig("0.8b");

/** 9B dims, for out-of-sample checks against the 9B numbers. */
export const QWEN35_9B: StandInConfig = standInConfig("9b");

/** Receives constants and keeps nothing: each gets its own (fictitious) place in weight.bin. */
class DiscardingSink implements BlobSink {
  private offset = 64;
  write(type: TensorType, data: MilData): BlobRef {
    const ref = { fileName: "@model_path/weights/weight.bin", offset: this.offset };
    this.offset += 64 + Math.ceil((data.length * bitsOf(type)) / 8 / 64) * 64;
    return ref;
  }
}

function bitsOf(t: TensorType): number {
  return t.dtype === "fp16"
    ? 16
    : t.dtype === "fp32" || t.dtype === "int32"
      ? 32
      : t.dtype === "uint4"
        ? 4
        : t.dtype === "uint6"
          ? 6
          : 8;
}

const zeros8 = new Map<number, Uint8Array>();
const zeros16 = new Map<number, Uint16Array>();
function z8(n: number): Uint8Array {
  let a = zeros8.get(n);
  if (!a) {
    a = new Uint8Array(n);
    zeros8.set(n, a);
  }
  return a;
}
function z16(n: number): Uint16Array {
  if (n > 1 << 24) return new Uint16Array(n); // the embedding table: not worth keeping alive
  let a = zeros16.get(n);
  if (!a) {
    a = new Uint16Array(n);
    zeros16.set(n, a);
  }
  return a;
}

/** Graph helpers over one MilBuilder; each names its ANE trick. */
class Graph {
  readonly b: MilBuilder;
  constructor(readonly cfg: StandInConfig) {
    this.b = new MilBuilder({ blobSink: new DiscardingSink() });
  }

  /** fp16 constant of zeros. */
  c16(shape: readonly number[], name: string): MilVar {
    const n = shape.reduce((a, d) => a * d, 1);
    return this.b.const(z16(n), "fp16", shape, { name });
  }

  /** A [cout, cin, 1, 1] conv weight, LUT-palettized: one LUT per `groupSize` output channels. */
  lutWeight(cout: number, cin: number, bits: 4 | 6 | 8, name: string): MilVar {
    const g = this.cfg.groupSize;
    const groups = cout % g === 0 ? cout / g : 1;
    return this.b.constexprLutToDense({
      indices: {
        data: z8(cout * cin),
        dtype: bits === 4 ? "uint4" : bits === 6 ? "uint6" : "uint8",
        shape: [cout, cin, 1, 1],
      },
      lut: { data: z16(groups * 2 ** bits), dtype: "fp16", shape: [groups, 1, 1, 1, 2 ** bits, 1] },
      name,
    });
  }

  /** 1×1 conv in BC1S layout: x [1, cin, 1, 1] → [1, cout, 1, 1] (ANEMLL's nn.Conv2d(k=1)). */
  proj(x: MilVar, cout: number, name: string, bits: 4 | 6 | 8 = this.cfg.bodyBits): MilVar {
    const w = this.lutWeight(cout, x.shape[1], bits, `${name}_w`);
    return this.b.conv({ x, weight: w, name });
  }

  /** RMSNorm on the ANE: layer_norm over concat([x, −x]) along `axis`, first half, × weight. */
  rmsnorm(x: MilVar, axis: number, name: string): MilVar {
    const b = this.b;
    const n = x.shape[axis];
    const both = b.concat({
      values: [x, b.mul({ x, y: -1, name: `${name}_neg` })],
      axis,
      name: `${name}_cat`,
    });
    const ln = b.layerNorm({ x: both, axes: [axis], epsilon: 1e-6, name: `${name}_ln` });
    const end = [...x.shape];
    const half = b.sliceByIndex({ x: ln, begin: x.shape.map(() => 0), end, name: `${name}_half` });
    const wShape = x.shape.map((_, i) => (i === axis ? n : 1));
    return b.mul({ x: half, y: this.c16(wShape, `${name}_w`), name });
  }

  /** SiLU as 0.5·x·(1 + tanh(x/2)): ANE silu is off by ~1e-3 near 0 (ane-toolchains.md §1.8). */
  silu(x: MilVar, name: string): MilVar {
    const b = this.b;
    const t = b.tanh({ x: b.mul({ x, y: 0.5, name: `${name}_half` }), name: `${name}_tanh` });
    const onePlus = b.add({ x: t, y: 1, name: `${name}_1p` });
    return b.mul({ x: b.mul({ x, y: 0.5, name: `${name}_xh` }), y: onePlus, name });
  }

  /** softplus as relu(x) + log(1 + exp(−|x|)): native fp16 softplus overflowed (§1.8). */
  softplus(x: MilVar, name: string): MilVar {
    const b = this.b;
    const e = b.exp({
      x: b.mul({ x: b.abs({ x, name: `${name}_abs` }), y: -1, name: `${name}_nabs` }),
      name: `${name}_exp`,
    });
    const l = b.log({ x: b.add({ x: e, y: 1, name: `${name}_1p` }), name: `${name}_log` });
    return b.add({ x: b.relu({ x, name: `${name}_relu` }), y: l, name });
  }

  mlp(x: MilVar, p: string): MilVar {
    const h = this.rmsnorm(x, 1, `${p}_post_norm`);
    const gate = this.silu(this.proj(h, this.cfg.mlp, `${p}_gate_proj`), `${p}_mlp_act`);
    const up = this.proj(h, this.cfg.mlp, `${p}_up_proj`);
    const down = this.proj(
      this.b.mul({ x: gate, y: up, name: `${p}_glu` }),
      this.cfg.hidden,
      `${p}_down_proj`,
    );
    return this.b.add({ x, y: down, name: `${p}_mlp_out` });
  }

  /** Gated DeltaNet layer, one decode token; conv history and recurrent state are Core ML states. */
  gdn(x: MilVar, p: string): MilVar {
    const b = this.b;
    const { keyHeads: hk, valueHeads: hv, headDim: d, convKernel: k } = this.cfg.gdn;
    const keyDim = hk * d;
    const convDim = 2 * keyDim + hv * d;
    const h = this.rmsnorm(x, 1, `${p}_in_norm`);
    const mixed = this.proj(h, convDim, `${p}_in_proj_qkv`);
    const zGate = this.proj(h, hv * d, `${p}_in_proj_z`);
    const bIn = this.proj(h, hv, `${p}_in_proj_b`);
    const aIn = this.proj(h, hv, `${p}_in_proj_a`);
    // causal depthwise conv over [history (K−1), current]
    const cs = b.state(`${p}_conv_state`, tensorType("fp16", [1, convDim, k - 1]));
    const win = b.concat({
      values: [
        b.readState({ input: cs, name: `${p}_conv_hist` }),
        b.reshape({ x: mixed, shape: [1, convDim, 1], name: `${p}_mixed_col` }),
      ],
      axis: 2,
      name: `${p}_conv_win`,
    });
    b.writeState({
      input: cs,
      data: b.sliceByIndex({ x: win, begin: [0, 0, 1], end: [1, convDim, k], name: `${p}_conv_next` }),
    });
    const conv = b.reduceSum({
      x: b.mul({ x: win, y: this.c16([1, convDim, k], `${p}_conv_w`), name: `${p}_conv_mul` }),
      axes: [2],
      name: `${p}_conv`,
    });
    const act = this.silu(conv, `${p}_conv_act`);
    const [q0, k0, v0] = b.split({ x: act, axis: 1, splitSizes: [keyDim, keyDim, hv * d], name: `${p}_qkv` });
    const l2 = (t: MilVar, scale: number, n: string) => {
      const t4 = b.reshape({ x: t, shape: [1, hk, 1, d], name: `${n}_heads` });
      const ss = b.reduceSumSquare({ x: t4, axes: [3], keepDims: true, name: `${n}_ss` });
      const r = b.rsqrt({ x: b.add({ x: ss, y: 1e-6, name: `${n}_eps` }), name: `${n}_rsqrt` });
      return b.mul({ x: b.mul({ x: t4, y: r, name: `${n}_unit` }), y: scale, name: n });
    };
    // GQA for GDN: value head j uses q/k head floor(j / r) — copies by concat (tile has no ANE kernel here)
    const r = hv / hk;
    const rep = (t: MilVar, n: string) => {
      if (r === 1) return t;
      const t5 = b.expandDims({ x: t, axes: [2], name: `${n}_x5` });
      const cat = b.concat({ values: Array.from({ length: r }, () => t5), axis: 2, name: `${n}_rep` });
      return b.reshape({ x: cat, shape: [1, hv, 1, d], name: `${n}_hv` });
    };
    const q = rep(l2(q0, 1 / Math.sqrt(d), `${p}_q`), `${p}_q`); // [1, Hv, 1, dk]
    const kk = rep(l2(k0, 1, `${p}_k`), `${p}_k`);
    const v = b.reshape({ x: v0, shape: [1, hv, d, 1], name: `${p}_v` });
    const beta = b.sigmoid({
      x: b.reshape({ x: bIn, shape: [1, hv, 1, 1], name: `${p}_b4` }),
      name: `${p}_beta`,
    });
    const aBias = b.add({
      x: b.reshape({ x: aIn, shape: [1, hv, 1, 1], name: `${p}_a4` }),
      y: this.c16([1, hv, 1, 1], `${p}_dt_bias`),
      name: `${p}_a_dt`,
    });
    const g = b.mul({
      x: this.softplus(aBias, `${p}_sp`),
      y: this.c16([1, hv, 1, 1], `${p}_neg_A`),
      name: `${p}_g`,
    });
    const decay = b.exp({ x: g, name: `${p}_decay` });
    // delta rule on S [1, Hv, dv, dk] as elementwise mul + reduce_sum (§4.3)
    const ss = b.state(`${p}_rec_state`, tensorType("fp16", [1, hv, d, d]));
    const s1 = b.mul({ x: b.readState({ input: ss, name: `${p}_S` }), y: decay, name: `${p}_S_decay` });
    const kv = b.reduceSum({
      x: b.mul({ x: s1, y: kk, name: `${p}_Sk` }),
      axes: [3],
      keepDims: true,
      name: `${p}_kv`,
    });
    const delta = b.mul({ x: b.sub({ x: v, y: kv, name: `${p}_v_kv` }), y: beta, name: `${p}_delta` });
    const s2 = b.add({ x: s1, y: b.mul({ x: delta, y: kk, name: `${p}_outer` }), name: `${p}_S_new` });
    b.writeState({ input: ss, data: s2 });
    const o = b.reduceSum({
      x: b.mul({ x: s2, y: q, name: `${p}_Sq` }),
      axes: [3],
      keepDims: true,
      name: `${p}_o`,
    });
    // gated RMSNorm per head, then out_proj
    const o3 = b.reshape({ x: o, shape: [1, hv, d], name: `${p}_o3` });
    const on = this.rmsnorm(o3, 2, `${p}_o_norm`);
    const gate = this.silu(b.reshape({ x: zGate, shape: [1, hv, d], name: `${p}_z3` }), `${p}_z_act`);
    const gated = b.reshape({
      x: b.mul({ x: on, y: gate, name: `${p}_gated` }),
      shape: [1, hv * d, 1, 1],
      name: `${p}_gated4`,
    });
    return b.add({ x, y: this.proj(gated, this.cfg.hidden, `${p}_out_proj`), name: `${p}_attn_out` });
  }

  /** Gated full attention, one decode token, partial RoPE on the first 64 dims, KV as states. */
  attention(x: MilVar, io: AttnIO, ctx: number, p: string): MilVar {
    const b = this.b;
    const { heads: nh, kvHeads: nkv, headDim: hd, rotaryDim: rot } = this.cfg.attn;
    const h = this.rmsnorm(x, 1, `${p}_in_norm`);
    const qg = b.reshape({
      x: this.proj(h, 2 * nh * hd, `${p}_q_proj`),
      shape: [1, nh, 2 * hd],
      name: `${p}_qg`,
    });
    const [q0, gate] = b.split({ x: qg, axis: 2, numSplits: 2, name: `${p}_q_gate` });
    const k0 = b.reshape({ x: this.proj(h, nkv * hd, `${p}_k_proj`), shape: [1, nkv, hd], name: `${p}_k0` });
    const v0 = b.reshape({
      x: this.proj(h, nkv * hd, `${p}_v_proj`),
      shape: [1, nkv, 1, hd],
      name: `${p}_v0`,
    });
    const rope = (t: MilVar, n: string) => {
      const heads = t.shape[1];
      const r = b.sliceByIndex({ x: t, begin: [0, 0, 0], end: [1, heads, rot], name: `${n}_rot` });
      const pass = b.sliceByIndex({ x: t, begin: [0, 0, rot], end: [1, heads, hd], name: `${n}_pass` });
      const [x1, x2] = b.split({ x: r, axis: 2, numSplits: 2, name: `${n}_halves` });
      const rh = b.concat({
        values: [b.mul({ x: x2, y: -1, name: `${n}_nx2` }), x1],
        axis: 2,
        name: `${n}_rot_half`,
      });
      const rr = b.add({
        x: b.mul({ x: r, y: io.cos, name: `${n}_cos` }),
        y: b.mul({ x: rh, y: io.sin, name: `${n}_sin` }),
        name: `${n}_roped`,
      });
      return b.concat({ values: [rr, pass], axis: 2, name: n });
    };
    const q = rope(this.rmsnorm(q0, 2, `${p}_q_norm`), `${p}_q`);
    const k = b.reshape({
      x: rope(this.rmsnorm(k0, 2, `${p}_k_norm`), `${p}_k`),
      shape: [1, nkv, 1, hd],
      name: `${p}_k4`,
    });
    const cache = (which: "k" | "v", t: MilVar) => {
      const st = b.state(`${p}_${which}_cache`, tensorType("fp16", [1, nkv, ctx, hd]));
      const upd = b.sliceUpdate({
        x: b.readState({ input: st, name: `${p}_${which}_old` }),
        update: t,
        begin: io.kvBegin,
        end: io.kvEnd,
        name: `${p}_${which}_upd`,
      });
      b.writeState({ input: st, data: upd });
      return b.readState({ input: st, name: `${p}_${which}_all` });
    };
    const kc = cache("k", k);
    const vc = cache("v", v0);
    // GQA by folding the query heads of each KV head into L (SDPA needs equal batch dims)
    const q4 = b.reshape({ x: q, shape: [1, nkv, nh / nkv, hd], name: `${p}_q4` });
    const att = b.scaledDotProductAttention({
      query: q4,
      key: kc,
      value: vc,
      attnMask: io.mask,
      name: `${p}_sdpa`,
    });
    const o = b.mul({
      x: b.reshape({ x: att, shape: [1, nh, hd], name: `${p}_o3` }),
      y: b.sigmoid({ x: gate, name: `${p}_gate_act` }),
      name: `${p}_gated`,
    });
    const o4 = b.reshape({ x: o, shape: [1, nh * hd, 1, 1], name: `${p}_o4` });
    return b.add({ x, y: this.proj(o4, this.cfg.hidden, `${p}_o_proj`), name: `${p}_attn_out` });
  }
}

interface AttnIO {
  readonly cos: MilVar;
  readonly sin: MilVar;
  readonly mask: MilVar;
  readonly kvBegin: MilVar;
  readonly kvEnd: MilVar;
}

/** One package holding super-blocks `first .. first+count−1` (DDDA each), decode at context `ctx`. */
export function buildSuperBlocks(cfg: StandInConfig, first: number, count: number, ctx: number): MlModel {
  const g = new Graph(cfg);
  const b = g.b;
  const input = b.input("hidden_states", tensorType("fp16", [1, 1, cfg.hidden]));
  const { rotaryDim: rot } = cfg.attn;
  const io: AttnIO = {
    cos: b.input("rope_cos", tensorType("fp16", [1, 1, rot])),
    sin: b.input("rope_sin", tensorType("fp16", [1, 1, rot])),
    mask: b.input("attn_mask", tensorType("fp16", [1, 1, 1, ctx])),
    kvBegin: b.input("kv_begin", tensorType("int32", [4])),
    kvEnd: b.input("kv_end", tensorType("int32", [4])),
  };
  let x = b.reshape({ x: input, shape: [1, cfg.hidden, 1, 1], name: "to_bc1s" });
  for (let sb = first; sb < first + count; sb++) {
    for (let j = 0; j < 4; j++) {
      const layer = sb * 4 + j;
      const p = `l${layer}`;
      x = j < 3 ? g.gdn(x, p) : g.attention(x, io, ctx, p);
      x = g.mlp(x, p);
    }
  }
  b.output("output_hidden_states", b.reshape({ x, shape: [1, 1, cfg.hidden], name: "from_bc1s" }));
  return b.model({
    metadata: {
      shortDescription: `STAND-IN (shape-accurate, not the converter's): super-blocks ${first}..${first + count - 1}, ctx ${ctx}`,
    },
  });
}

/** Embedding package: gather of one row from the fp16 [vocab, hidden] table (no LUT, as ANEMLL's default). */
export function buildEmbed(cfg: StandInConfig): MlModel {
  const g = new Graph(cfg);
  const ids = g.b.input("input_ids", tensorType("int32", [1, 1]));
  const table = g.c16([cfg.vocab, cfg.hidden], "embed_tokens");
  g.b.output("hidden_states", g.b.gather({ x: table, indices: ids, axis: 0, name: "embed" }));
  return g.b.model({ metadata: { shortDescription: "STAND-IN (shape-accurate): embeddings" } });
}

/** lm_head package: final norm, then the vocabulary split into `headSplit` LUT 1×1 convs. */
export function buildLmHead(cfg: StandInConfig, bits: 4 | 6 | 8): MlModel {
  const g = new Graph(cfg);
  const b = g.b;
  const input = b.input("hidden_states", tensorType("fp16", [1, 1, cfg.hidden]));
  const h = g.rmsnorm(
    b.reshape({ x: input, shape: [1, cfg.hidden, 1, 1], name: "to_bc1s" }),
    1,
    "final_norm",
  );
  const rows = cfg.vocab / cfg.headSplit;
  for (let i = 0; i < cfg.headSplit; i++) b.output(`logits${i + 1}`, g.proj(h, rows, `lm_head16_${i}`, bits));
  return b.model({
    metadata: { shortDescription: `STAND-IN (shape-accurate): lm_head split ${cfg.headSplit}, LUT${bits}` },
  });
}

export interface StandInChainOptions {
  /** Super-blocks per package (1 = unfused … cfg.superBlocks = all fused). */
  readonly fuse: number;
  readonly ctx: number;
  readonly headBits: 4 | 6 | 8;
}

/** embed → super-block packages → lm_head; identical packages are built once and shared. */
export function buildStandInChain(cfg: StandInConfig, o: StandInChainOptions): ChainInput {
  if (cfg.superBlocks % o.fuse !== 0)
    throw new Error(`fuse ${o.fuse} must divide ${cfg.superBlocks} super-blocks`);
  const sbModel = buildSuperBlocks(cfg, 0, o.fuse, o.ctx);
  const components: ChainComponent[] = [{ name: "embed", model: buildEmbed(cfg) }];
  for (let i = 0; i < cfg.superBlocks; i += o.fuse) {
    const name = o.fuse === 1 ? `sb${i}` : `sb${i}-${i + o.fuse - 1}`;
    components.push({ name, model: sbModel });
  }
  components.push({ name: `lm_head_lut${o.headBits}`, model: buildLmHead(cfg, o.headBits) });
  return { name: `${cfg.label} STAND-IN fuse${o.fuse} ctx${o.ctx} head-lut${o.headBits}`, components };
}

/**
 * Interpreter decode speed on one Qwen3.5-0.8B super-block with the real shapes:
 * three Gated-DeltaNet layers and one gated full-attention layer (KV cache of ctx 256), each
 * with its MLP and two RMSNorms, random fp16 weights. Runs N decode steps in fp32 and fp16
 * modes, times the lm_head matvec (248320 x 1024) with the embedding gather, and projects
 * tok/s for the whole model (6 super-blocks + head).
 *
 *   pnpm --filter @anemll-qwen35/ir exec tsx bench/interpreter-superblock.ts [steps]
 *
 * Writes bench/results/interpreter-superblock.json. The graph is only shaped like the real one
 * (the converter builds the real Qwen3.5 graph).
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import os from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { f32ToF16Bits, type Tensor, tensor } from "@anemll-qwen35/core";
import {
  MilBuilder,
  MilInterpreter,
  type MilVar,
  type Precision,
  type RunProfile,
  tensorType,
} from "../src/mil/index.js";

const HIDDEN = 1024;
const MLP = 3584;
const VOCAB = 248320;
const GDN = { heads: 16, dk: 128, dv: 128, conv: 4 }; // qkv = 3 x 16 x 128 = 6144
const ATT = { heads: 8, kvHeads: 2, dim: 256, ctx: 256 };
const SUPERBLOCKS = 6;
const WARMUP = 3;

/** xorshift32 random fp16 weights, uniform in ±scale (bit patterns, no Float32 detour kept). */
function randomF16(n: number, scale: number, seed: number): Uint16Array {
  const out = new Uint16Array(n);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = f32ToF16Bits(((s >>> 0) / 4294967296 - 0.5) * 2 * scale);
  }
  return out;
}

let seed = 1;
function weight(
  b: MilBuilder,
  shape: number[],
  name: string,
  scale = 1 / Math.sqrt(shape[shape.length - 1]),
): MilVar {
  const n = shape.reduce((p, d) => p * d, 1);
  return b.const(randomF16(n, scale, seed++ * 2654435761), "fp16", shape, { name });
}

/** RMSNorm over the last dim: x · rsqrt(mean(x²) + eps) · w. */
function rmsNorm(b: MilBuilder, x: MilVar, w: MilVar, name: string): MilVar {
  const ms = b.reduceMean({ x: b.mul({ x, y: x }), axes: [-1], keepDims: true });
  const inv = b.rsqrt({ x: b.add({ x: ms, y: 1e-6 }) });
  return b.mul({ x: b.mul({ x, y: inv }), y: w, name });
}

function mlp(b: MilBuilder, h: MilVar, p: string): MilVar {
  const x = rmsNorm(b, h, weight(b, [HIDDEN], `${p}_post_norm`, 1), `${p}_mlp_in`);
  const gate = b.linear({ x, weight: weight(b, [MLP, HIDDEN], `${p}_gate_w`), name: `${p}_gate` });
  const up = b.linear({ x, weight: weight(b, [MLP, HIDDEN], `${p}_up_w`), name: `${p}_up` });
  const down = b.linear({
    x: b.mul({ x: b.silu({ x: gate }), y: up }),
    weight: weight(b, [HIDDEN, MLP], `${p}_down_w`),
    name: `${p}_down`,
  });
  return b.add({ x: h, y: down, name: `${p}_out` });
}

/** Gated DeltaNet layer, one decode step (recurrent state [H, dk, dv], short conv state). */
function gdnLayer(b: MilBuilder, h: MilVar, i: number): MilVar {
  const p = `gdn${i}`;
  const { heads: H, dk, dv, conv: K } = GDN;
  const C = H * (2 * dk + dv);
  const convState = b.state(`${p}_conv`, tensorType("fp16", [1, C, K - 1]));
  const recState = b.state(`${p}_rec`, tensorType("fp16", [H, dk, dv]));
  const x = rmsNorm(b, h, weight(b, [HIDDEN], `${p}_in_norm`, 1), `${p}_in`);
  const qkv = b.linear({ x, weight: weight(b, [C, HIDDEN], `${p}_qkv_w`), name: `${p}_qkv` });
  const z = b.linear({ x, weight: weight(b, [H * dv, HIDDEN], `${p}_z_w`), name: `${p}_z` });
  const a = b.linear({ x, weight: weight(b, [H, HIDDEN], `${p}_a_w`), name: `${p}_a` });
  const beta = b.sigmoid({ x: b.linear({ x, weight: weight(b, [H, HIDDEN], `${p}_b_w`), name: `${p}_b` }) });
  // causal depthwise conv over time: [state | new] -> conv -> silu; the state keeps the last K-1
  const win = b.concat({
    values: [b.readState({ input: convState }), b.transpose({ x: qkv, perm: [0, 2, 1] })],
    axis: 2,
  });
  b.writeState({ input: convState, data: b.sliceByIndex({ x: win, begin: [0, 0, 1], end: [1, C, K] }) });
  const conv = b.silu({ x: b.conv({ x: win, weight: weight(b, [C, 1, K], `${p}_conv_w`, 0.5), groups: C }) });
  const [q, k, v] = b.split({
    x: b.reshape({ x: conv, shape: [C] }),
    splitSizes: [H * dk, H * dk, H * dv],
    axis: 0,
  });
  const l2 = (t: MilVar, scale: number) => {
    const t2 = b.reshape({ x: t, shape: [H, dk] });
    const inv = b.rsqrt({
      x: b.add({ x: b.reduceSum({ x: b.mul({ x: t2, y: t2 }), axes: [-1], keepDims: true }), y: 1e-6 }),
    });
    return b.mul({ x: b.mul({ x: t2, y: inv }), y: scale });
  };
  const qn = l2(q, 1 / Math.sqrt(dk));
  const kn = l2(k, 1);
  // decay = exp(-exp(A_log) · softplus(a + dt_bias)) per head
  const g = b.mul({
    x: weight(b, [H], `${p}_neg_A`, 1),
    y: b.softplus({ x: b.add({ x: b.reshape({ x: a, shape: [H] }), y: weight(b, [H], `${p}_dt_bias`, 1) }) }),
  });
  const decay = b.reshape({ x: b.exp({ x: g }), shape: [H, 1, 1] });
  // delta rule: S = S·decay; S += k ⊗ ((v − Sᵀk)·β); o = Sᵀq
  const S0 = b.mul({ x: b.readState({ input: recState }), y: decay });
  const kcol = b.reshape({ x: kn, shape: [H, dk, 1] });
  const kvMem = b.reduceSum({ x: b.mul({ x: S0, y: kcol }), axes: [1] });
  const delta = b.mul({
    x: b.sub({ x: b.reshape({ x: v, shape: [H, dv] }), y: kvMem }),
    y: b.reshape({ x: beta, shape: [H, 1] }),
  });
  const S1 = b.coremlUpdateState(
    recState,
    b.add({ x: S0, y: b.mul({ x: kcol, y: b.reshape({ x: delta, shape: [H, 1, dv] }) }) }),
  );
  const o = b.reduceSum({ x: b.mul({ x: S1, y: b.reshape({ x: qn, shape: [H, dk, 1] }) }), axes: [1] });
  const gated = b.mul({
    x: rmsNorm(b, o, weight(b, [dv], `${p}_o_norm`, 1), `${p}_o_normed`),
    y: b.silu({ x: b.reshape({ x: z, shape: [H, dv] }) }),
  });
  const out = b.linear({
    x: b.reshape({ x: gated, shape: [1, 1, H * dv] }),
    weight: weight(b, [HIDDEN, H * dv], `${p}_out_w`),
    name: `${p}_out_proj`,
  });
  return mlp(b, b.add({ x: h, y: out }), p);
}

/** Gated full attention, one decode step against a KV cache of ATT.ctx positions. */
function attentionLayer(
  b: MilBuilder,
  h: MilVar,
  io: { cos: MilVar; sin: MilVar; begin: MilVar; end: MilVar; mask: MilVar },
): MilVar {
  const p = "att";
  const { heads: H, kvHeads: KV, dim: D, ctx } = ATT;
  const kCache = b.state(`${p}_k_cache`, tensorType("fp16", [1, KV, ctx, D]));
  const vCache = b.state(`${p}_v_cache`, tensorType("fp16", [1, KV, ctx, D]));
  const x = rmsNorm(b, h, weight(b, [HIDDEN], `${p}_in_norm`, 1), `${p}_in`);
  const qg = b.reshape({
    x: b.linear({ x, weight: weight(b, [2 * H * D, HIDDEN], `${p}_q_w`), name: `${p}_q` }),
    shape: [1, 1, H, 2 * D],
  });
  const [q, gate] = b.split({ x: qg, numSplits: 2, axis: -1 });
  const k = b.reshape({
    x: b.linear({ x, weight: weight(b, [KV * D, HIDDEN], `${p}_k_w`), name: `${p}_k` }),
    shape: [1, 1, KV, D],
  });
  const v = b.reshape({
    x: b.linear({ x, weight: weight(b, [KV * D, HIDDEN], `${p}_v_w`), name: `${p}_v` }),
    shape: [1, 1, KV, D],
  });
  const rope = (t: MilVar) => {
    const [t1, t2] = b.split({ x: t, numSplits: 2, axis: -1 });
    const rot = b.concat({ values: [b.mul({ x: t2, y: -1 }), t1], axis: -1 });
    return b.add({ x: b.mul({ x: t, y: io.cos }), y: b.mul({ x: rot, y: io.sin }) });
  };
  const qr = rope(rmsNorm(b, q, weight(b, [D], `${p}_q_norm`, 1), `${p}_qn`));
  const kr = rope(rmsNorm(b, k, weight(b, [D], `${p}_k_norm`, 1), `${p}_kn`));
  // fold the 4 query heads of each KV head into the query length: SDPA needs equal batch dims
  const qh = b.reshape({ x: b.transpose({ x: qr, perm: [0, 2, 1, 3] }), shape: [1, KV, H / KV, D] });
  const kh = b.transpose({ x: kr, perm: [0, 2, 1, 3] });
  const vh = b.transpose({ x: v, perm: [0, 2, 1, 3] });
  const kc = b.coremlUpdateState(
    kCache,
    b.sliceUpdate({ x: b.readState({ input: kCache }), update: kh, begin: io.begin, end: io.end }),
  );
  const vc = b.coremlUpdateState(
    vCache,
    b.sliceUpdate({ x: b.readState({ input: vCache }), update: vh, begin: io.begin, end: io.end }),
  );
  const att = b.scaledDotProductAttention({ query: qh, key: kc, value: vc, attnMask: io.mask });
  const heads = b.reshape({ x: att, shape: [1, 1, H, D] });
  const gated = b.mul({ x: heads, y: b.sigmoid({ x: gate }) });
  const o = b.linear({
    x: b.reshape({ x: gated, shape: [1, 1, H * D] }),
    weight: weight(b, [HIDDEN, H * D], `${p}_o_w`),
    name: `${p}_o`,
  });
  return mlp(b, b.add({ x: h, y: o }), p);
}

export function buildSuperblock(): MilBuilder {
  const b = new MilBuilder();
  let h = b.input("hidden", tensorType("fp16", [1, 1, HIDDEN]));
  const io = {
    cos: b.input("cos", tensorType("fp16", [1, 1, 1, ATT.dim])),
    sin: b.input("sin", tensorType("fp16", [1, 1, 1, ATT.dim])),
    begin: b.input("kv_begin", tensorType("int32", [4])),
    end: b.input("kv_end", tensorType("int32", [4])),
    mask: b.input("mask", tensorType("fp16", [1, 1, 1, ATT.ctx])),
  };
  for (let i = 0; i < 3; i++) h = gdnLayer(b, h, i);
  h = attentionLayer(b, h, io);
  b.output("hidden_out", h);
  return b;
}

function buildHead(): MilBuilder {
  const b = new MilBuilder();
  const ids = b.input("ids", tensorType("int32", [1, 1]));
  const h = b.input("hidden", tensorType("fp16", [1, 1, HIDDEN]));
  const table = weight(b, [VOCAB, HIDDEN], "embed_tokens", 0.05); // tied embedding / lm_head
  b.output("embeds", b.gather({ x: table, indices: ids, axis: 0 }));
  b.output("logits", b.linear({ x: h, weight: table, name: "lm_head" }));
  return b;
}

export function decodeInputs(pos: number): Record<string, Tensor> {
  const hidden = new Float32Array(HIDDEN);
  for (let i = 0; i < HIDDEN; i++) hidden[i] = Math.sin(pos * 31 + i * 0.37);
  const cos = new Float32Array(ATT.dim);
  const sin = new Float32Array(ATT.dim);
  for (let i = 0; i < ATT.dim; i++) {
    const theta = pos / 10000 ** ((2 * (i % (ATT.dim / 2))) / ATT.dim);
    cos[i] = Math.cos(theta);
    sin[i] = Math.sin(theta);
  }
  const mask = new Float32Array(ATT.ctx).map((_, j) => (j <= pos ? 0 : -30000));
  return {
    hidden: tensor("f32", [1, 1, HIDDEN], hidden),
    cos: tensor("f32", [1, 1, 1, ATT.dim], cos),
    sin: tensor("f32", [1, 1, 1, ATT.dim], sin),
    kv_begin: tensor("i32", [4], Int32Array.from([0, 0, pos, 0])),
    kv_end: tensor("i32", [4], Int32Array.from([1, ATT.kvHeads, pos + 1, ATT.dim])),
    mask: tensor("f32", [1, 1, 1, ATT.ctx], mask),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function topOps(p: RunProfile, n = 6): Record<string, number> {
  return Object.fromEntries(
    Object.entries(p)
      .sort((a, b) => b[1].ms - a[1].ms)
      .slice(0, n)
      .map(([k, v]) => [k, Number(v.ms.toFixed(2))]),
  );
}

/** Wall and CPU time (user + system, all threads of the process) of one call. */
function timed<T>(f: () => T): { value: T; ms: number; cpuMs: number } {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const value = f();
  const ms = performance.now() - t0;
  const d = process.cpuUsage(c0);
  return { value, ms, cpuMs: (d.user + d.system) / 1000 };
}

const round2 = (x: number) => Number(x.toFixed(2));

export async function interpreterSuperblockBench(steps = 10): Promise<unknown> {
  const built = timed(() => buildSuperblock().program());
  const program = built.value;
  const ops = program.functions.main.block.operations.length;
  console.log(`super-block: ${ops} ops, built in ${built.ms.toFixed(0)} ms`);
  const modes: Record<string, unknown> = {};
  const wall: Partial<Record<Precision, { median: number; min: number; cpu: number }>> = {};
  for (const precision of ["fp32", "fp16"] as const) {
    const it = new MilInterpreter(program, { precision });
    const state = it.newState();
    const first = timed(() => it.run(decodeInputs(0), { state })); // includes decoding weights into the SIMD heap
    for (let s = 1; s <= WARMUP; s++) it.run(decodeInputs(s), { state }); // let the JIT settle
    const times: number[] = [];
    const cpu: number[] = [];
    let profile: RunProfile | undefined;
    let nonFinite = 0;
    for (let s = WARMUP + 1; s <= WARMUP + steps; s++) {
      const r = timed(() => it.run(decodeInputs(s), { state, profile: s === WARMUP + steps }));
      times.push(r.ms);
      cpu.push(r.cpuMs);
      profile = r.value.profile ?? profile;
      nonFinite += r.value.nonFinite.length;
    }
    wall[precision] = { median: median(times), min: Math.min(...times), cpu: median(cpu) };
    modes[precision] = {
      firstRunMs: round2(first.ms),
      stepMsMedian: round2(median(times)),
      stepMsMin: round2(Math.min(...times)),
      cpuMsPerStepMedian: round2(median(cpu)),
      stepsMs: times.map(round2),
      nonFiniteOutputs: nonFinite,
      topOpsMs: profile ? topOps(profile) : {},
    };
    console.log(
      `  ${precision}: first run ${first.ms.toFixed(0)} ms, step median ${median(times).toFixed(1)} ms (min ${Math.min(...times).toFixed(1)}, CPU ${median(cpu).toFixed(1)})`,
    );
  }
  // head: lm_head matvec + embedding gather on the tied 248320 x 1024 table
  const headBuilt = timed(() => buildHead().program());
  console.log(`head built in ${headBuilt.ms.toFixed(0)} ms`);
  const headIt = new MilInterpreter(headBuilt.value, { precision: "fp32" });
  const headInputs = { ids: tensor("i32", [1, 1], Int32Array.from([12345])), hidden: decodeInputs(3).hidden };
  const headFirst = timed(() => headIt.run(headInputs));
  const headTimes: number[] = [];
  const headCpu: number[] = [];
  let headProfile: RunProfile | undefined;
  for (let s = 0; s < Math.max(3, Math.ceil(steps / 2)); s++) {
    const r = timed(() => headIt.run(headInputs, { profile: true, outputs: "fp32" }));
    headTimes.push(r.ms);
    headCpu.push(r.cpuMs);
    headProfile = r.value.profile;
  }
  const head = { median: median(headTimes), min: Math.min(...headTimes), cpu: median(headCpu) };
  console.log(
    `  head: first run ${headFirst.ms.toFixed(0)} ms, median ${head.median.toFixed(1)} ms (min ${head.min.toFixed(1)}, CPU ${head.cpu.toFixed(1)})`,
  );
  const projection = (pick: "median" | "min" | "cpu") => {
    const one = (p: Precision) => {
      const tokenMs = SUPERBLOCKS * (wall[p]?.[pick] ?? Number.NaN) + head[pick];
      return { tokenMs: Number(tokenMs.toFixed(1)), tokPerS: Number((1000 / tokenMs).toFixed(3)) };
    };
    return { fp32: one("fp32"), fp16: one("fp16") };
  };
  const result = {
    bench: "interpreter-superblock",
    date: new Date().toISOString(),
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      node: process.version,
      platform: `${process.platform}-${process.arch}`,
    },
    threads: Number(process.env.ANEMLL_THREADS) || Math.min(8, os.availableParallelism()),
    loadAverage: os.loadavg().map(round2),
    shapes: {
      hidden: HIDDEN,
      mlp: MLP,
      vocab: VOCAB,
      gdn: GDN,
      attention: ATT,
      superblocks: SUPERBLOCKS,
      ops,
    },
    steps,
    superblock: modes,
    head: {
      firstRunMs: round2(headFirst.ms),
      medianMs: round2(head.median),
      minMs: round2(head.min),
      cpuMsMedian: round2(head.cpu),
      topOpsMs: headProfile ? topOps(headProfile) : {},
    },
    // 6 x super-block step + head; medians after 3 warm-up steps
    projected: projection("median"),
    // the same from the fastest step and head run (the machine is shared: load varies)
    projectedFromFastest: projection("min"),
    // from CPU time of all threads: what a single otherwise idle core would take
    projectedFromCpuTime: projection("cpu"),
    note: "head = lm_head matvec + embedding gather (fp32 mode); matrix products in WebAssembly SIMD split over `threads` threads",
  };
  console.log("projected (medians):", result.projected);
  console.log("projected (fastest):", result.projectedFromFastest);
  console.log("projected (CPU time, one idle core):", result.projectedFromCpuTime);
  const out = join(dirname(fileURLToPath(import.meta.url)), "results", "interpreter-superblock.json");
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(`${out}.tmp`, `${JSON.stringify(result, null, 2)}\n`);
  renameSync(`${out}.tmp`, out);
  console.log(`wrote ${out}`);
  return result;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await interpreterSuperblockBench(Number(process.argv[2] ?? 10));
}

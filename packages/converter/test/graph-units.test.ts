/**
 * The graph builders' parts: ANE helpers checked numerically through the ir interpreter against
 * direct formulas, the I/O contract helpers, option parsing and range checks, and the refusal of
 * MoE checkpoints.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type AnemllError, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import { argmaxToken, decodeMask } from "@anemll-qwen35/ir/chain";
import { parseQwen35Config, Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { interpret, MilBuilder, tensorType } from "@anemll-qwen35/ir/mil";
import { describe, expect, it } from "vitest";
import {
  buildComponent,
  GraphWeights,
  MASK_NEG,
  planPieces,
  repeatInterleaveHeads,
  rmsNormAne,
  ropeTables,
  rowsFloat32,
  siluTanh,
  softplusStable,
  type WeightEncodingReport,
  type WeightSource,
} from "../src/graph/index.js";
import {
  formatWeightQuant,
  GraphOptionError,
  parseWeightQuant,
  planQuant,
  UnsupportedModelError,
  type WeightQuant,
} from "../src/index.js";
import { depalettize, palettize } from "../src/quant/palettize.js";
import { fixtureDir, hasFixture } from "./golden.js";

/** Deterministic values in [-scale, scale). */
function values(n: number, seed: number, scale = 3): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2 * scale;
  });
}

/** Runs a one-input graph built by `body` on x, in the given precision. */
function run(
  x: Float32Array,
  shape: number[],
  dtype: "fp16" | "fp32",
  body: (b: MilBuilder, x: ReturnType<MilBuilder["input"]>) => ReturnType<MilBuilder["input"]>,
) {
  const b = new MilBuilder();
  const input = b.input("x", tensorType(dtype, shape));
  b.output("y", body(b, input));
  const xt: Tensor = tensor("f32", shape, x);
  const r = interpret(b.program(), { x: xt }, { precision: dtype, outputs: "fp32" });
  return { y: toFloat32(r.outputs.y.dtype, r.outputs.y.data), nonFinite: r.nonFinite };
}

describe("ANE helpers", () => {
  it("rmsNormAne (layer_norm over [x, −x]) is RMSNorm: x / √(mean(x²) + eps) · γ", () => {
    const C = 48;
    const x = values(2 * C, 7);
    const gamma = values(C, 9, 1);
    const { y } = run(x, [1, 2, 1, C], "fp32", (b, v) =>
      rmsNormAne(b, v, { axis: 3, eps: 1e-6, gamma: b.const(gamma, "fp32", [C]), name: "n" }),
    );
    for (let r = 0; r < 2; r++) {
      const row = x.subarray(r * C, (r + 1) * C);
      const inv = 1 / Math.sqrt(row.reduce((s, v) => s + v * v, 0) / C + 1e-6);
      for (let c = 0; c < C; c++) expect(y[r * C + c]).toBeCloseTo(row[c] * inv * gamma[c], 5);
    }
  });

  it("siluTanh is x·sigmoid(x)", () => {
    const x = values(64, 3, 8);
    const { y } = run(x, [1, 64, 1, 1], "fp32", (b, v) => siluTanh(b, v, "s"));
    for (const [i, v] of x.entries()) expect(y[i]).toBeCloseTo(v / (1 + Math.exp(-v)), 5);
  });

  it("softplusStable matches log(1 + eˣ) and stays finite in fp16 where the naive form overflows", () => {
    const x = Float32Array.of(-60, -12, -1, -1e-3, 0, 1e-3, 1, 12, 20, 60, 3000);
    const ref = (v: number) => Math.max(v, 0) + Math.log1p(Math.exp(-Math.abs(v)));
    const f32 = run(x, [1, x.length], "fp32", (b, v) => softplusStable(b, v, "sp"));
    for (const [i, v] of x.entries()) expect(f32.y[i]).toBeCloseTo(ref(v), 5);
    const f16 = run(x, [1, x.length], "fp16", (b, v) => softplusStable(b, v, "sp"));
    expect(f16.nonFinite).toEqual([]);
    for (const [i, v] of x.entries()) {
      expect(Math.abs(f16.y[i] - ref(v))).toBeLessThanOrEqual(2e-3 * Math.max(1, Math.abs(ref(v))));
    }
    // the naive form in fp16: exp(12) = 162755 > 65504 → inf
    const naive = run(x, [1, x.length], "fp16", (b, v) => b.log({ x: b.add({ x: b.exp({ x: v }), y: 1 }) }));
    expect(naive.nonFinite.length).toBeGreaterThan(0);
  });

  it("repeatInterleaveHeads: output head j is input head floor(j / r)", () => {
    const d = 3;
    const x = Float32Array.of(1, 2, 3, 10, 20, 30); // heads [1,2,3], [10,20,30]
    const { y } = run(x, [1, 2, 1, d], "fp32", (b, v) => repeatInterleaveHeads(b, v, 3, "rep"));
    expect(Array.from(y)).toEqual([1, 2, 3, 1, 2, 3, 1, 2, 3, 10, 20, 30, 10, 20, 30, 10, 20, 30]);
  });
});

describe("I/O contract helpers", () => {
  it("decodeMask: io has ctx + 1 keys (cache rows < position, then this token); mlstate ctx keys (rows ≤ position)", () => {
    const io = decodeMask("io", 6, 2);
    expect(Array.from(io)).toEqual([0, 0, MASK_NEG, MASK_NEG, MASK_NEG, MASK_NEG, 0]);
    expect(Array.from(decodeMask("io", 4, 0))).toEqual([MASK_NEG, MASK_NEG, MASK_NEG, MASK_NEG, 0]);
    expect(Array.from(decodeMask("mlstate", 4, 2))).toEqual([0, 0, 0, MASK_NEG]);
    expect(Array.from(decodeMask("mlstate", 4, 3))).toEqual([0, 0, 0, 0]);
    expect(() => decodeMask("io", 4, 4)).toThrow(/outside the context/);
  });

  it("planPieces: fewest pieces ≤ maxRows, as even as possible, in whole units", () => {
    expect(planPieces(248320, 16384, 8)).toEqual(
      Array.from({ length: 16 }, (_, i) => ({ rowOffset: i * 15520, rows: 15520 })),
    );
    // Qwen3.5-27B's MLP channels
    expect(planPieces(17408, 16384, 8)).toEqual([
      { rowOffset: 0, rows: 8704 },
      { rowOffset: 8704, rows: 8704 },
    ]);
    for (const [V, max, unit] of [
      [1088, 300, 8],
      [1088, 100, 8],
      [151936, 16384, 8],
      [1001, 300, 8], // unit does not divide V → rows of 1
      [50, 64, 8],
    ]) {
      const p = planPieces(V, max, unit);
      expect(p.reduce((s, x) => s + x.rows, 0)).toBe(V);
      expect(Math.max(...p.map((x) => x.rows))).toBeLessThanOrEqual(max);
      expect(Math.max(...p.map((x) => x.rows)) - Math.min(...p.map((x) => x.rows))).toBeLessThanOrEqual(
        V % unit === 0 ? unit : 1,
      );
      for (const [i, x] of p.entries())
        expect(x.rowOffset).toBe(i === 0 ? 0 : p[i - 1].rowOffset + p[i - 1].rows);
      expect(p.length).toBeLessThanOrEqual(Math.ceil(V / max) + 1);
    }
  });

  it("argmaxToken adds the winning piece's offset; ties go to the first piece", () => {
    expect(argmaxToken([0, 100, 200], [5, 7, 9], [1, 3, 2])).toBe(107);
    expect(argmaxToken([0, 100], [4, 2], [3, 3])).toBe(4);
  });

  it("ropeTables follow inv_freq = θ^(−2i/rot): cos² + sin² = 1 and the angle at position p is p·inv_freq", () => {
    const cfg = { rotaryDim: 8, ropeTheta: 1e7 } as Parameters<typeof ropeTables>[0];
    const { cos, sin } = ropeTables(cfg, 5);
    for (let p = 0; p < 5; p++) {
      for (let i = 0; i < 4; i++) {
        const angle = p * 1e7 ** (-(2 * i) / 8);
        expect(cos[p * 4 + i]).toBeCloseTo(Math.cos(angle), 6);
        expect(sin[p * 4 + i]).toBeCloseTo(Math.sin(angle), 6);
      }
    }
  });

  it("parseWeightQuant reads none / lutN[,group|,per-tensor] / int8[,block] and formatWeightQuant writes them back", () => {
    for (const s of ["none", "lut4", "lut6,16", "lut8,per-tensor", "int8", "int8,32"])
      expect(formatWeightQuant(parseWeightQuant(s))).toBe(s);
    expect(parseWeightQuant("LUT4")).toEqual({ kind: "lut", bits: 4 });
    expect(parseWeightQuant("fp16")).toEqual({ kind: "none" });
    for (const bad of ["lut5", "lut4,0", "int4", "q4"]) {
      expect(() => parseWeightQuant(bad, "quant.body")).toThrow(GraphOptionError);
      expect(() => parseWeightQuant(bad, "quant.body")).toThrow(/quant\.body/);
    }
  });
});

describe.skipIf(!hasFixture("tiny-gqa"))("buildComponent options and errors (fixtures/tiny-gqa)", () => {
  it("rejects out-of-range specs and options with GraphOptionError naming the field", async () => {
    await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-gqa"));
    const n = ck.config.superBlocks.length;
    const cases: [Parameters<typeof buildComponent>[1], Parameters<typeof buildComponent>[2], string][] = [
      [{ kind: "embed" }, { ctx: 0 }, "ctx"],
      [{ kind: "embed" }, { ctx: 1e9 }, "ctx"],
      [{ kind: "superblocks", first: n - 1, count: 2 }, { ctx: 8 }, "spec.first"],
      [{ kind: "superblocks", first: 0, count: 0 }, { ctx: 8 }, "spec.count"],
      [{ kind: "lm_head" }, { ctx: 8, lmHeadMaxRows: 0 }, "lmHeadMaxRows"],
      [{ kind: "embed" }, { ctx: 8, dtype: "bf16" as "fp16" }, "dtype"],
      [{ kind: "superblocks", first: 0, count: 1 }, { ctx: 8, attention: "flash" as "sdpa" }, "attention"],
      [{ kind: "superblocks", first: 0, count: 1 }, { ctx: 8, mlpMaxChannels: 0 }, "mlpMaxChannels"],
    ];
    for (const [spec, opts, field] of cases) {
      const err = await buildComponent(ck, spec, opts).catch((e: unknown) => e);
      expect(err, field).toBeInstanceOf(GraphOptionError);
      expect((err as GraphOptionError).field).toBe(field);
    }
  });

  it("encodes in row chunks exactly as in one piece (plain, LUT, int8), and a LUT expands to palettize's values", async () => {
    await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-gqa"));
    const stored = await ck.get("embed");
    const D = stored.shape[1];
    const V = 256; // the first 256 rows: [V, D]
    const encode = async (quant: WeightQuant, chunkElements?: number) => {
      const b = new MilBuilder();
      const reports: WeightEncodingReport[] = [];
      const w = new GraphWeights(b, ck, {
        dtype: "fp32",
        quant: planQuant(ck.config, { rules: [{ pattern: "embed", quant }] }),
        onWeight: (r) => reports.push(r),
        workers: 1,
        chunkElements,
      });
      b.output(
        "w",
        b.identity({ x: await w.encodeRows(stored, { start: 0, end: V, tail: [D] }, "embed", "table") }),
      );
      const out = interpret(b.program(), {}, { outputs: "fp32" }).outputs.w;
      return { values: out.data as Float32Array, report: reports[0] };
    };
    const quants: WeightQuant[] = [{ kind: "none" }, { kind: "lut", bits: 4 }, { kind: "int8" }];
    for (const q of quants) {
      const whole = await encode(q);
      const chunked = await encode(q, 3 * 8 * D); // 3 groups of 8 rows per chunk, last chunk partial
      expect(chunked.values, formatWeightQuant(q)).toEqual(whole.values);
      expect(chunked.report.relative).toBeCloseTo(whole.report.relative, 12);
      expect(chunked.report.encoding).toBe(whole.report.encoding);
    }
    const p = await palettize(rowsFloat32(stored, 0, V), [V, D], { bits: 4, groupSize: 8, workers: 1 });
    expect((await encode({ kind: "lut", bits: 4 }, 5 * 8 * D)).values).toEqual(depalettize(p));
  });

  it("stops at the next tensor read when the signal is aborted", async () => {
    await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-gqa"));
    const ac = new AbortController();
    ac.abort();
    await expect(
      buildComponent(ck, { kind: "superblocks", first: 0, count: 1 }, { ctx: 8, signal: ac.signal }),
    ).rejects.toThrow(/abort/i);
  });

  it("reports every encoded weight once, with its role, shape and bits", async () => {
    await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-gqa"));
    const seen: WeightEncodingReport[] = [];
    const { io } = await buildComponent(
      ck,
      { kind: "lm_head" },
      {
        ctx: 8,
        lmHeadMaxRows: 400,
        quant: { rules: [{ pattern: "lm_head", quant: { kind: "lut", bits: 6, groupSize: 16 } }] },
        onWeight: (r) => seen.push(r),
        workers: 1,
      },
    );
    const pieces = io.lmHead?.pieces ?? [];
    expect(seen.map((r) => r.name)).toEqual(pieces.map((_, i) => `lm_head_${i}_weight`));
    for (const [i, r] of seen.entries()) {
      expect(r).toMatchObject({
        tensor: "lm_head",
        role: "lm_head",
        bits: 6,
        encoding: "lut6,g16",
        shape: [pieces[i].rows, ck.config.hiddenSize, 1, 1],
      });
      expect(pieces[i].rows % 16).toBe(0);
      expect(r.relative).toBeGreaterThan(0);
      expect(r.relative).toBeLessThan(0.1);
    }
  });
});

describe("MoE checkpoints", () => {
  const moeError = (e: unknown) => {
    expect(e).toBeInstanceOf(UnsupportedModelError);
    expect((e as AnemllError).code).toBe("E_UNSUPPORTED_MODEL");
    expect((e as UnsupportedModelError).alternative).toBe("@anemll-qwen35/runtime-mlx");
    expect((e as Error).message).toMatch(/runtime-mlx/);
    expect((e as Error).message).toMatch(/mixture-of-experts/);
  };

  it.skipIf(!hasFixture("tiny-moe"))(
    "fixtures/tiny-moe is refused for every component, pointing to runtime-mlx",
    async () => {
      await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-moe"));
      for (const spec of [
        { kind: "embed" },
        { kind: "superblocks", first: 0, count: 1 },
        { kind: "lm_head" },
      ] as const) {
        moeError(await buildComponent(ck, spec, { ctx: 8 }).catch((e: unknown) => e));
      }
    },
  );

  it.skipIf(!hasFixture("tiny-gqa"))(
    "the refusal comes from the config, before any tensor is read",
    async () => {
      const dense = JSON.parse(readFileSync(join(fixtureDir("tiny-gqa"), "config.json"), "utf8"));
      const text = {
        ...dense.text_config,
        model_type: "qwen3_5_moe_text",
        num_experts: 4,
        num_experts_per_tok: 2,
        moe_intermediate_size: 32,
        shared_expert_intermediate_size: 32,
      };
      const config = parseQwen35Config(
        { ...dense, model_type: "qwen3_5_moe", text_config: text },
        "moe/config.json",
      );
      const source: WeightSource = {
        config,
        tiedEmbeddings: false,
        get: async (name) => {
          throw new Error(`tensor ${name} must not be read`);
        },
      };
      const e = await buildComponent(source, { kind: "embed" }, { ctx: 8 }).catch((x: unknown) => x);
      moeError(e);
      expect((e as Error).message).toMatch(/moe\/config\.json/);
    },
  );
});

/** The one option resolution: each option checked once, named by its CLI flag (convert) or its field (a build). */
import { parseQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { publishedConfigJson } from "@anemll-qwen35/testkit";
import { describe, expect, it } from "vitest";
import { ConvertOptionError, GraphOptionError } from "../src/errors.js";
import {
  type BuildOptions,
  type ConvertOptions,
  checkConvertForModel,
  DEFAULT_LM_HEAD_MAX_ROWS,
  defaultBuckets,
  fitConvertToModel,
  resolveBuildOptions,
  resolveConvertOptions,
} from "../src/options.js";
import { planQuant } from "../src/quant/plan.js";

const cfg = parseQwen35Config(publishedConfigJson("0.8b"));
const base = { model: "m", out: "o" };
const convertError = (o: Partial<ConvertOptions>) => {
  try {
    resolveConvertOptions({ ...base, ...o });
  } catch (e) {
    return e as ConvertOptionError;
  }
  throw new Error(`accepted ${JSON.stringify(o)}`);
};
const buildError = (o: Partial<BuildOptions>) => {
  try {
    resolveBuildOptions(cfg, { kind: "superblocks", first: 0, count: 1 }, { ctx: 256, ...o });
  } catch (e) {
    return e as GraphOptionError;
  }
  throw new Error(`accepted ${JSON.stringify(o)}`);
};

describe("convert's options", () => {
  it("fills the defaults", () => {
    const r = resolveConvertOptions(base);
    expect(r).toMatchObject({
      ctx: 4096,
      buckets: [256, 1024, 4096],
      ctxDefault: true,
      fuse: "all",
      budgetBytes: 1.5e9,
      state: "io",
      dtype: "fp16",
      attention: "matmul",
      prefillBatch: 64,
      gdnPrefill: "chunked",
      argmax: false,
      lmHeadMaxRows: DEFAULT_LM_HEAD_MAX_ROWS,
      lmHeadAuto: false,
    });
    expect(r.quant.groupSize).toBe(8);
    expect(resolveConvertOptions({ ...base, lmHeadMaxRows: "auto" })).toMatchObject({ lmHeadAuto: true });
  });

  it("gives one bucket for --ctx alone, the last of --buckets as ctx, and the default buckets cut to the model", () => {
    expect(resolveConvertOptions({ ...base, ctx: 2048 })).toMatchObject({ ctx: 2048, buckets: [2048] });
    expect(resolveConvertOptions({ ...base, buckets: [256, 512] })).toMatchObject({
      ctx: 512,
      buckets: [256, 512],
    });
    expect(defaultBuckets(16384)).toEqual([256, 1024, 4096, 16384]);
    const cfg = { maxPositionEmbeddings: 2048 } as Parameters<typeof fitConvertToModel>[1];
    expect(fitConvertToModel(resolveConvertOptions(base), cfg)).toMatchObject({
      ctx: 2048,
      buckets: [256, 1024, 2048],
    });
    // a context asked for is kept (and refused by checkConvertForModel when past the model's)
    expect(fitConvertToModel(resolveConvertOptions({ ...base, ctx: 4096 }), cfg).ctx).toBe(4096);
  });

  it("refuses each bad option with ConvertOptionError naming its flag and what it takes", () => {
    const cases: [Partial<ConvertOptions>, string, RegExp][] = [
      [{ ctx: 64 }, "ctx", /^--ctx must be an integer from 128 to 16384, got 64$/],
      [{ ctx: 16385 }, "ctx", /^--ctx must be an integer from 128 to 16384, got 16385$/],
      [{ buckets: [1024, 256] }, "buckets", /^--buckets must ascend, got 1024,256$/],
      [{ buckets: [64, 256] }, "buckets", /^--buckets must be an integer from 128 to 256/],
      [
        { ctx: 2048, buckets: [256, 1024] },
        "buckets",
        /^--buckets must end at the context 2048, got 256,1024$/,
      ],
      [{ ctx: 300.5 }, "ctx", /got 300\.5/],
      [{ fuse: 0 }, "fuse", /^--fuse must be a positive integer or "all", got 0$/],
      [{ budgetBytes: -1 }, "budget", /^--budget must be positive, got -1$/],
      [{ groupSize: 0 }, "group-size", /^--group-size must be a positive integer, got 0$/],
      [{ state: "disk" as "io" }, "state", /^--state must be io or mlstate, got disk$/],
      [{ dtype: "bf16" as "fp16" }, "dtype", /^--dtype must be fp16 or fp32, got bf16$/],
      [{ attention: "matmul-joined" as "sdpa" }, "attention", /must be matmul or sdpa/],
      [
        { prefillBatch: 129 },
        "prefill-batch",
        /^--prefill-batch must be an integer from 0 \(decode only\) to 128, got 129$/,
      ],
      [{ gdnPrefill: "wy" as "scan" }, "gdn-prefill", /must be chunked or scan, got wy/],
      [{ lmHeadMaxRows: 0 }, "lmhead-rows", /must be a positive integer/],
      [{ workers: 0 }, "workers", /must be a positive integer/],
      [{ quant: "lut5" }, "quant", /^--quant unknown preset "lut5"/],
    ];
    for (const [o, flag, message] of cases) {
      const e = convertError(o);
      expect(e, flag).toBeInstanceOf(ConvertOptionError);
      expect(e.option, flag).toBe(flag);
      expect(e.message, flag).toMatch(message);
    }
  });

  it("checks ctx against the model and every written rule against its tensors once it is open", () => {
    const r = resolveConvertOptions({ ...base, ctx: 4096, quant: "default,gdn.in_proj_qvk=lut8" });
    const small = { ...cfg, maxPositionEmbeddings: 2048 };
    expect(() => checkConvertForModel(r, small, planQuant(small, r.quant))).toThrow(
      /^--ctx 4096 exceeds the model's max_position_embeddings \(2048\)$/,
    );
    expect(() => checkConvertForModel(r, cfg, planQuant(cfg, r.quant))).toThrow(
      /--quant "gdn\.in_proj_qvk" matches no tensor of this model/,
    );
  });
});

describe("a build's options", () => {
  it("run the same checks, naming the field, with the build's own ranges (any ctx ≥ 1, prefill batch ≤ ctx)", () => {
    expect(buildError({ ctx: 0 })).toMatchObject({
      field: "ctx",
      detail: "must be a positive integer, got 0",
    });
    expect(buildError({ prefillBatch: 257 })).toMatchObject({
      field: "prefillBatch",
      detail: "must be an integer from 0 (decode only) to 256, got 257",
    });
    expect(buildError({ dtype: "bf16" as "fp16" })).toMatchObject({ field: "dtype" });
    expect(buildError({ attention: "flash" as "sdpa" }).detail).toBe(
      "must be matmul, sdpa or matmul-joined, got flash",
    );
    expect(buildError({ quant: { rules: [], groupSize: 0 } })).toMatchObject({ field: "quant.groupSize" });
    for (const e of [buildError({ ctx: 0 }), buildError({ wyChunk: 0 })])
      expect(e).toBeInstanceOf(GraphOptionError);
    // what convert refuses (ctx 64, a 200-token prefill) a build of its own may take
    const o = resolveBuildOptions(cfg, { kind: "embed" }, { ctx: 64 });
    expect(o.ctx).toBe(64);
    expect(resolveBuildOptions(cfg, { kind: "embed" }, { ctx: 256, prefillBatch: 200 }).prefillBatch).toBe(
      200,
    );
  });

  it("takes a policy (planned for the model) or the plan a conversion made once", () => {
    const plan = planQuant(cfg, { rules: [{ pattern: "body", quant: { kind: "int8" } }] });
    expect(resolveBuildOptions(cfg, { kind: "lm_head" }, { ctx: 8, quant: plan }).quant).toBe(plan);
    const planned = resolveBuildOptions(cfg, { kind: "lm_head" }, { ctx: 8, quant: plan.policy }).quant;
    expect(planned.tensor("layers.0.mlp.up_proj.weight").encoding).toEqual({ kind: "int8" });
    expect(
      resolveBuildOptions(cfg, { kind: "lm_head" }, { ctx: 8 }).quant.tensor("lm_head").encoding,
    ).toEqual({
      kind: "none",
    });
  });
});

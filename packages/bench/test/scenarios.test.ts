/**
 * Every scenario at smoke scale (tiny fixture, ctx 128, a few tokens): the result validates against
 * the schema, the runs carry the metrics the scenario promises, and the charts exist as SVG and PNG.
 * Conversions go to a temporary cache so the test is hermetic.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  type BenchResult,
  ensureChain,
  fixtureModel,
  mlxStatus,
  readResult,
  rechart,
  resultStem,
  runScenario,
  type ScenarioName,
} from "../src/index.js";
import { progressLines } from "../src/models.js";
import { benchDirs } from "./bench-dirs.js";

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const dirs = benchDirs("bench");
const mlx = mlxStatus();

async function smoke(name: ScenarioName): Promise<BenchResult> {
  const r = await runScenario(name, { scale: "smoke", out: dirs.out });
  expect(existsSync(r.file)).toBe(true);
  // the file on disk, read back through the schema, is what was returned
  const back = await readResult(r.file);
  expect(back.scenario).toBe(name);
  expect(back.scale).toBe("smoke");
  expect(back.command).toContain(`bench ${name}`);
  expect(back.machine.node).toBe(process.version);
  return back;
}

function expectCharts(r: BenchResult, atLeast: number): void {
  const svgs = r.charts.filter((f) => f.endsWith(".svg"));
  const pngs = r.charts.filter((f) => f.endsWith(".png"));
  expect(svgs.length).toBeGreaterThanOrEqual(atLeast);
  expect(pngs.length).toBe(svgs.length);
  for (const f of svgs) expect(readFileSync(join(dirs.out, f), "utf8")).toMatch(/^<svg[^>]*xmlns/);
  for (const f of pngs) {
    const bytes = readFileSync(join(dirs.out, f));
    expect([...bytes.subarray(0, 8)]).toEqual(PNG_SIGNATURE);
    expect(statSync(join(dirs.out, f)).size).toBeGreaterThan(5000);
  }
}

function metricOf(r: BenchResult, runId: RegExp, name: string) {
  const run = r.runs.find((x) => runId.test(x.id));
  expect(run, `a run matching ${runId}`).toBeDefined();
  const m = run!.metrics.find((x) => x.name === name);
  expect(m, `${name} on ${run!.id}`).toBeDefined();
  return m!;
}

/** MLX runs when its addon loads; otherwise the result must say so. */
function expectMlxOrSkip(r: BenchResult): void {
  if (mlx.available) {
    expect(r.runs.some((x) => x.backend.startsWith("mlx"))).toBe(true);
  } else {
    expect(r.skipped.some((s) => /mlx backend is unavailable/.test(s.reason))).toBe(true);
  }
}

describe("long preparation shows progress", () => {
  it("converting a model for a run logs each package, then reuses it silently", async () => {
    const lines: string[] = [];
    const o = { ctx: 128, fuse: 1, body: "none", lmHead: "none" } as const;
    const first = await ensureChain(fixtureModel("tiny-tied"), o, (l) => lines.push(l));
    expect(first.convertSeconds).toBeGreaterThan(0);
    expect(lines).toContainEqual(expect.stringMatching(/^converting tiny-tied: 0% embed$/));
    expect(lines).toContainEqual(expect.stringMatching(/^converting tiny-tied: \d+% sb_00$/));
    expect(lines).toContainEqual(expect.stringMatching(/^converting tiny-tied: \d+% lm_head$/));
    expect(lines.at(-1)).toMatch(/^converted tiny-tied in \d+\.\d s$/);
    lines.length = 0;
    const again = await ensureChain(fixtureModel("tiny-tied"), o, (l) => lines.push(l));
    expect(again.convertSeconds).toBeUndefined();
    expect(lines).toEqual([]);
  });

  it("prints a line when the step changes, and at most one per 10 s within a step", () => {
    const lines: string[] = [];
    const progress = progressLines((l) => lines.push(l), "writing");
    for (let i = 0; i <= 100; i++) progress("", i / 100);
    progress("next", 1);
    expect(lines).toEqual(["writing: 0%", "writing: 100% next"]);
  });
});

describe.sequential("bench scenarios at smoke scale", () => {
  it("decode: warm tok/s and cold load per backend", async () => {
    const r = await smoke("decode");
    expect(r.status).toBe(mlx.available ? "ok" : "partial");
    const tok = metricOf(r, /^ane-/, "decode_tok_s");
    expect(tok.samples).toHaveLength(3);
    expect(tok.summary.median).toBeGreaterThan(0);
    expect(tok.summary.p10).toBeLessThanOrEqual(tok.summary.p90);
    expect(metricOf(r, /^ane-/, "load_ms").summary.median).toBeGreaterThan(0);
    expect(r.runs[0].conversion?.ctx).toBe(128);
    expectMlxOrSkip(r);
    expectCharts(r, 2);
  });

  it("prefill: a 64-token prompt, batched through the prefill function and token by token, labelled", async () => {
    const r = await smoke("prefill");
    const batched = r.runs.find((x) => /^ane-.* · batched · 64 tokens$/.test(x.id));
    const single = r.runs.find((x) => /^ane-.* · token-by-token · 64 tokens$/.test(x.id));
    expect(batched?.config).toMatchObject({ promptTokens: 64, mode: "batched" });
    expect(batched?.notes.join(" ")).toMatch(/prefill function, 64 tokens a call/);
    expect(single?.notes.join(" ")).toMatch(/decode function, one call per prompt token/);
    for (const run of [batched!, single!]) {
      const tok = run.metrics.find((m) => m.name === "prefill_tok_s")!;
      expect(tok.samples).toHaveLength(2);
      expect(tok.summary.median).toBeGreaterThan(0);
    }
    expectMlxOrSkip(r);
    expectCharts(r, 1);
  });

  it("ctx-sweep: ms per super-block at ctx 128 and 256", async () => {
    const r = await smoke("ctx-sweep");
    for (const c of [128, 256]) {
      const m = metricOf(r, new RegExp(`^ane-.* ctx ${c}$`), "ms_per_superblock");
      expect(m.summary.median).toBeGreaterThan(0);
    }
    expectCharts(r, 2);
  });

  it("fusion-sweep: two packages at fuse 1, one at fuse all", async () => {
    const r = await smoke("fusion-sweep");
    const packages = r.runs.map((x) => x.config.superBlockPackages);
    expect(packages).toEqual([2, 1]);
    // the per-package split adds up: 2 super-blocks in both chains
    for (const run of r.runs) {
      const perBlock = run.metrics.find((m) => m.name === "ms_per_superblock")!.samples;
      const all = run.metrics.find((m) => m.name === "superblocks_ms")!.samples;
      for (const [i, v] of perBlock.entries()) expect(v * 2).toBeCloseTo(all[i], 6);
    }
    expectCharts(r, 2);
  });

  it("handoff: chain of k packages vs one package", async () => {
    const r = await smoke("handoff");
    expect(r.runs.map((x) => `${x.config.layout}:${x.config.k}`)).toEqual([
      "chain:1",
      "single:1",
      "chain:2",
      "single:2",
      "chain:4",
      "single:4",
    ]);
    expectCharts(r, 1);
    // the charts come from the JSON alone: removing them and re-charting the file brings them back
    for (const f of r.charts) rmSync(join(dirs.out, f));
    const again = await rechart(join(dirs.out, `${resultStem(r)}.json`));
    expect(again.result.charts).toEqual(r.charts);
    expectCharts(again.result, 1);
  });

  it("parallel: solo and together in child processes", async () => {
    const r = await smoke("parallel");
    if (!mlx.available) {
      expect(r.status).toBe("skipped");
      expect(r.skipped[0].reason).toMatch(/mlx/);
      return;
    }
    expect(r.runs).toHaveLength(7);
    const kept = metricOf(r, /^fg MLX .* in fg MLX \+ bg ANE$/, "foreground_preserved_pct");
    expect(kept.summary.median).toBeGreaterThan(0);
    expect(metricOf(r, /^fg MLX .* in fg MLX \+ bg MLX$/, "combined_tok_s").summary.median).toBeGreaterThan(
      0,
    );
    for (const run of r.runs) expect(run.metrics[0].summary.median).toBeGreaterThan(0);
    expectCharts(r, 2);
  });

  it("pairing: an MLX MoE foreground per variant beside the ANE background", async () => {
    const r = await smoke("pairing");
    expect(r.runs.find((x) => x.id === "bg ANE - · solo")).toBeDefined();
    if (!mlx.available) {
      expect(r.skipped.some((s) => /mlx/.test(s.reason))).toBe(true);
      return;
    }
    for (const v of ["4bit", "8bit", "bf16"]) {
      const fg = r.runs.find((x) => x.id === `fg MoE ${v} · solo`);
      expect(fg?.model.name).toBe("tiny-moe");
      expect(fg?.conversion?.bits).toBe(v === "bf16" ? undefined : Number.parseInt(v, 10));
      expect(
        metricOf(r, new RegExp(`^fg MoE ${v} · together$`), "foreground_preserved_pct").summary.median,
      ).toBeGreaterThan(0);
      expect(
        metricOf(r, new RegExp(`^fg MoE ${v} · together$`), "combined_tok_s").summary.median,
      ).toBeGreaterThan(0);
    }
    expect(r.runs.find((x) => x.id === "fg MoE bf16 · solo")?.conversion?.dtype).toBe("bfloat16");
    expectCharts(r, 2);
  });

  it("split: N layers on MLX, the rest on the chain, the same tokens as either runtime alone", async () => {
    const r = await runScenario("split", { scale: "smoke", out: dirs.out, tokens: 12 });
    if (!mlx.available) {
      expect(r.result.status).toBe("skipped");
      return;
    }
    const ns = r.result.runs.map((x) => x.config.mlxLayers);
    expect(ns).toEqual([0, 4, 8]);
    const splitRun = r.result.runs.find((x) => x.config.where === "split")!;
    expect(splitRun.metrics.find((m) => m.name === "mlx_ms")!.summary.median).toBeGreaterThan(0);
    expect(splitRun.metrics.find((m) => m.name === "ane_ms")!.summary.median).toBeGreaterThan(0);
    // unquantized fixture: every greedy token of the split is the chain's and MLX's (teacher-forced)
    for (const run of r.result.runs) {
      for (const name of ["agreement_with_chain", "agreement_with_mlx"]) {
        expect(run.metrics.find((m) => m.name === name)!.summary.median, `${run.id} ${name}`).toBe(1);
      }
    }
    expect(r.result.notes.join(" ")).toMatch(/18\.75 tok\/s/);
    expectCharts(r.result, 1);
  });

  it("expert-skip: the shared-expert-only draft's acceptance against the full MoE", async () => {
    const r = await smoke("expert-skip");
    if (!mlx.available) {
      expect(r.status).toBe("skipped");
      return;
    }
    const a = metricOf(r, /^draft .* shared expert only$/, "acceptance_rate").summary.median;
    expect(a).toBeGreaterThanOrEqual(0);
    expect(a).toBeLessThan(1); // skipping the routed experts changes the model
    expect(metricOf(r, /^draft /, "agreement").samples).toHaveLength(7);
    expect(r.notes.join(" ")).toMatch(/4\.2%/);
    // the draft checkpoint: routed experts' down projections zero, everything else as the target
    const { mx } = await import("@anemll-qwen35/runtime-mlx");
    const { expertSkipCheckpoint, fixtureDir } = await import("../src/index.js");
    const dir = await expertSkipCheckpoint(fixtureDir("tiny-moe"), "tiny-moe");
    for (const f of readdirSync(dir).filter((x) => x.endsWith(".safetensors"))) {
      const { arrays } = mx.loadSafetensors(join(dir, f));
      const { arrays: orig } = mx.loadSafetensors(join(fixtureDir("tiny-moe"), f));
      for (const [k, v] of Object.entries(arrays)) {
        const got = v.toTypedArray() as ArrayLike<number>;
        const want = orig[k].toTypedArray() as ArrayLike<number>;
        if (/^model\.language_model\.layers\.\d+\.mlp\.experts\.down_proj$/.test(k)) {
          expect(
            Array.from(got).every((x) => x === 0),
            k,
          ).toBe(true);
        } else expect(Array.from(got), k).toEqual(Array.from(want));
      }
      mx.dispose([arrays, orig]);
    }
    expectCharts(r, 1);
  });

  it("fp32-islands: precision recovered per op selection and the ANE placement it costs", async () => {
    const r = await smoke("fp32-islands");
    const err = (id: string) =>
      metricOf(r, new RegExp(`^${id.replace(/[()]/g, "\\$&")}$`), "max_abs_logit_error");
    const off = (id: string) =>
      metricOf(r, new RegExp(`^${id.replace(/[()]/g, "\\$&")}$`), "ops_off_ane").summary.median;
    // every result kept fp32 is the fp32 program itself; all-fp16 is not
    expect(err("all (fp32 throughout)").summary.max).toBe(0);
    expect(err("none (all fp16)").summary.max).toBeGreaterThan(0);
    expect(off("none (all fp16)")).toBe(0);
    for (const id of ["norms", "attention", "GDN state update"]) {
      expect(off(id), id).toBeGreaterThan(0);
      expect(off(id)).toBeLessThan(off("all (fp32 throughout)"));
    }
    const int = metricOf(r, /^norms$/, "interruptions").summary.median;
    expect(int).toBeGreaterThan(0);
    expectCharts(r, 2);
  });

  it("kv-expand: one attention op and the decode, with the KV cache grown or pre-expanded", async () => {
    const r = await smoke("kv-expand");
    if (!mlx.available) {
      expect(r.status).toBe("skipped");
      return;
    }
    const ops = r.runs.filter((x) => x.config.level === "op");
    expect(ops).toHaveLength(6);
    for (const o of ops) expect(o.metrics[0].summary.median).toBeGreaterThan(0);
    expect(new Set(ops.map((o) => o.config.cache))).toEqual(new Set(["grown", "expanded"]));
    expect(metricOf(r, /^decode · expanded$/, "decode_tok_s").summary.median).toBeGreaterThan(0);
    expect(metricOf(r, /^decode · grown$/, "decode_tok_s").summary.median).toBeGreaterThan(0);
    expect(r.runs.find((x) => x.id === "decode · expanded")?.conversion?.ctx).toBe(128);
    expect(r.notes.join(" ")).toMatch(/\+25% per op, -33% end to end/);
    expectCharts(r, 2);
  });

  it("speculative: a real draft → verify → rollback loop per draft, its acceptance and speed-up", async () => {
    const r = await smoke("speculative");
    const drafts = r.runs.filter((x) => x.config.role === "draft");
    expect(drafts.length).toBeGreaterThanOrEqual(2);
    for (const d of drafts) {
      const a = metricOf(r, new RegExp(`^${d.id.replace(/[()]/g, "\\$&")}$`), "acceptance_rate").summary
        .median;
      expect(a).toBeGreaterThanOrEqual(0);
      expect(a).toBeLessThanOrEqual(1);
    }
    // the unpalettized chain is the same model: it must agree with the target far more often than not
    const control = drafts.find((d) => /control/.test(String(d.config.draft)));
    expect(control).toBeDefined();
    expect(control!.metrics.find((m) => m.name === "acceptance_rate")!.summary.median).toBeGreaterThan(0.6);
    for (const d of drafts) {
      const m = (name: string) => d.metrics.find((x) => x.name === name);
      expect(m("speedup_gamma2")!.summary.median).toBeGreaterThan(0);
      // every round emits the accepted proposals and one target token
      const accepted = m("accepted_gamma2")!;
      const perRound = m("tokens_per_round_gamma2")!;
      expect(perRound.summary.n).toBe(accepted.summary.n);
      expect(perRound.summary.mean).toBeCloseTo(accepted.summary.mean + 1, 9);
    }
    expectCharts(r, 2);
  });

  it("speculative --draft mtp: the MTP head's acceptance per γ on held-out text, outputs equal to plain", async () => {
    const r = await runScenario("speculative", { scale: "smoke", out: dirs.out, draft: "mtp" });
    expect(r.result.command).toContain("--draft mtp");
    if (r.result.status === "skipped") {
      expect(r.result.skipped[0].reason).toMatch(/mlx/i); // no MLX here
      return;
    }
    const run = r.result.runs.find((x) => x.config.role === "mtp")!;
    const m = (name: string) => run.metrics.find((x) => x.name === name)!.summary;
    for (const g of [1, 2, 3, 4]) {
      const rate = m(`acceptance_rate_gamma${g}`).median;
      expect(rate).toBeGreaterThan(0.1); // a trained head: far above chance (1/993)
      expect(rate).toBeLessThanOrEqual(1);
      expect(m(`tokens_per_call_gamma${g}`).median).toBeCloseTo(1 + m(`mean_accepted_gamma${g}`).median, 9);
      expect(m(`same_tokens_gamma${g}`).min).toBe(1);
    }
    // deeper drafts are accepted less often per token, but give more tokens per call
    expect(m("acceptance_rate_gamma4").median).toBeLessThan(m("acceptance_rate_gamma1").median);
    expect(m("mean_accepted_gamma4").median).toBeGreaterThan(m("mean_accepted_gamma1").median);
    expectCharts(r.result, 2);
  });

  it("power: skipped with the reason off macOS-as-root", async () => {
    const r = await smoke("power");
    if (process.platform !== "darwin") {
      expect(r.status).toBe("skipped");
      expect(r.runs).toHaveLength(0);
      expect(r.skipped[0].reason).toMatch(new RegExp(process.platform));
      expect(r.charts).toHaveLength(0);
    }
  });
});

/** The parts under the scenarios: statistics, the speculative loop, powermetrics parsing, the schema, per-package timing and charts. */
import { mkdtempSync, readdirSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { f32ToF16Bits, type Tensor, tensor } from "@anemll-qwen35/core";
import type { StateSnapshot, StepModel, StepOutput } from "@anemll-qwen35/generate";
import { referenceBackend } from "@anemll-qwen35/runtime-ane";
import { afterAll, describe, expect, it } from "vitest";
import { writeHandoffPackages } from "../src/handoff-packages.js";
import {
  BenchOptionError,
  type BenchResult,
  BenchResultError,
  ComponentTimer,
  greedy,
  parsePowermetrics,
  promptIds,
  rechart,
  renderSvg,
  resultStem,
  runScenario,
  speculativeDecode,
  summarize,
  svgToPng,
  timedBackend,
  top2Margin,
  validateResult,
  vegaLiteSpec,
  writeResult,
} from "../src/index.js";

const tmp = mkdtempSync(join(tmpdir(), "bench-units-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe("summarize", () => {
  it("takes linear-interpolated percentiles like numpy", () => {
    const s = summarize([10, 1, 9, 2, 8, 3, 7, 4, 6, 5]);
    expect(s).toEqual({ n: 10, median: 5.5, mean: 5.5, min: 1, max: 10, p10: 1.9, p90: 9.1 });
    expect(summarize([4]).p10).toBe(4);
    expect(() => summarize([])).toThrow(RangeError);
  });
});

/**
 * A model whose next token is a function of the last two ids it consumed (a `wrongAt` position
 * makes the draft propose another): small enough to know every answer, and with a state the loop
 * must snapshot and roll back correctly.
 */
class RuleModel implements StepModel {
  readonly contextLength = 1000;
  history: number[] = [];
  decodes = 0;
  constructor(
    private readonly wrongAt: (position: number) => boolean = () => false,
    withAll = false,
  ) {
    if (withAll) (this as { prefillAll?: unknown }).prefillAll = (ids: number[]) => this.all(ids);
  }
  get position() {
    return this.history.length;
  }
  reset() {
    this.history = [];
  }
  async prefill(ids: Int32Array | number[]): Promise<StepOutput> {
    this.history.push(...ids);
    return this.out();
  }
  async decode(id: number): Promise<StepOutput> {
    this.decodes++;
    return this.prefill([id]);
  }
  async snapshot(): Promise<StateSnapshot> {
    return {
      position: this.position,
      bytes: 8,
      history: this.history.slice(),
      dispose() {},
    } as StateSnapshot;
  }
  async restore(s: StateSnapshot) {
    this.history = (s as StateSnapshot & { history: number[] }).history.slice();
  }
  dispose() {}
  private async all(ids: number[]): Promise<Float32Array> {
    const rows = new Float32Array(ids.length * 64);
    for (const [i, id] of ids.entries()) {
      this.history.push(id);
      rows.set((this.out() as { logits: Float32Array }).logits, i * 64);
    }
    return rows;
  }
  private out(): StepOutput {
    const [a = 0, b = 0] = this.history.slice(-2);
    let next = (a * 7 + b * 3 + 1) % 50;
    if (this.wrongAt(this.history.length)) next = (next + 1) % 50;
    const logits = new Float32Array(64);
    logits[next] = 1;
    return { logits };
  }
}

describe("the speculative loop", () => {
  const prompt = [3, 5, 8];
  const alone = async (n: number) => {
    const m = new RuleModel();
    const tokens = [greedy(await m.prefill(prompt))];
    while (tokens.length < n) tokens.push(greedy(await m.decode(tokens[tokens.length - 1])));
    return tokens;
  };

  it("emits the target's greedy tokens, accepting the draft up to its first miss, rolling back", async () => {
    const want = await alone(20);
    for (const verify of ["sequential", "batch"] as const) {
      for (const gamma of [1, 2, 3, 5]) {
        const target = new RuleModel(() => false, verify === "batch");
        const draft = new RuleModel((pos) => pos % 4 === 0);
        const r = await speculativeDecode(target, draft, prompt, { gamma, tokens: 20, vocab: 64, verify });
        expect(r.tokens, `${verify} γ=${gamma}`).toEqual(want);
        expect(r.verify).toBe(verify);
        expect(r.tokensPerRound.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(19);
        expect(r.acceptedPerRound.every((a, i) => a + 1 === r.tokensPerRound[i] && a <= gamma)).toBe(true);
        // the draft misses every 4th position: some rounds stop short, and both models end where
        // the emitted tokens say (all but the last emitted consumed)
        if (gamma >= 4) expect(Math.min(...r.acceptedPerRound)).toBeLessThan(gamma);
        expect(target.history).toEqual([
          ...prompt,
          ...r.tokens.slice(0, target.history.length - prompt.length),
        ]);
        expect(draft.history).toEqual(target.history);
        if (gamma > 2 || verify === "batch") expect(r.rollbacks).toBeGreaterThan(0);
      }
    }
  });

  it("accepts every proposal of a draft that always agrees, and needs no rollback", async () => {
    const r = await speculativeDecode(new RuleModel(), new RuleModel(), prompt, { gamma: 3, tokens: 13 });
    expect(r.acceptedPerRound).toEqual([3, 3, 3]);
    expect(r.tokensPerRound).toEqual([4, 4, 4]);
    expect(r.rollbacks).toBe(0);
    expect(r.tokens).toEqual(await alone(13));
  });

  it("refuses models without snapshots and a bad γ", async () => {
    const bare = Object.assign(new RuleModel(), { snapshot: undefined });
    await expect(speculativeDecode(bare, new RuleModel(), prompt, { gamma: 2, tokens: 5 })).rejects.toThrow(
      /cannot snapshot/,
    );
    await expect(
      speculativeDecode(new RuleModel(), new RuleModel(), prompt, { gamma: 0, tokens: 5 }),
    ).rejects.toThrow(RangeError);
  });
});

describe("powermetrics text", () => {
  it("reads the per-sample power lines", () => {
    const sample = (cpu: number, gpu: number, ane: number) =>
      `*** Sampled system activity ***\n\n**** Processor usage ****\n\nCPU Power: ${cpu} mW\nGPU Power: ${gpu} mW\nANE Power: ${ane} mW\nCombined Power (CPU + GPU + ANE): ${cpu + gpu + ane} mW\n`;
    const p = parsePowermetrics(sample(1200, 30, 4900) + sample(1100, 25, 4800));
    expect(p).toEqual({
      cpuMw: [1200, 1100],
      gpuMw: [30, 25],
      aneMw: [4900, 4800],
      combinedMw: [6130, 5925],
    });
    expect(parsePowermetrics("nothing here").aneMw).toEqual([]);
  });
});

describe("result schema", () => {
  const valid = (): BenchResult => ({
    format: "anemll-qwen35.bench-result",
    formatVersion: 1,
    scenario: "decode",
    scale: "smoke",
    question: "q",
    startedAt: "2026-01-01T00:00:00.000Z",
    finishedAt: "2026-01-01T00:00:01.000Z",
    command: "anemll-qwen35 bench decode --scale smoke",
    status: "ok",
    machine: {
      os: "Linux",
      platform: "linux",
      arch: "x64",
      release: "6",
      cpu: { model: "x", cores: 2 },
      memoryBytes: 1,
      node: "v20",
      mlx: { available: false, reason: "r" },
      coreml: { available: false, reason: "r" },
      loadAverage: [0, 0, 0],
    },
    runs: [
      {
        id: "a",
        backend: "ane-reference",
        model: { name: "m", source: "s" },
        config: { k: 1 },
        metrics: [{ name: "x", unit: "ms", samples: [1], summary: summarize([1]) }],
        notes: [],
      },
    ],
    skipped: [],
    notes: [],
    charts: [],
  });
  it("accepts a complete document", () => {
    expect(validateResult(valid()).runs[0].id).toBe("a");
  });
  it("two runs on one day keep two files; re-charting keeps a file's name", async () => {
    const morning = { ...valid(), startedAt: "2026-01-01T09:05:07.000Z" };
    const evening = { ...valid(), startedAt: "2026-01-01T21:00:00.000Z" };
    expect(resultStem(morning)).toBe("decode-smoke-2026-01-01-090507");
    expect(resultStem({ ...evening, scale: "full" })).toBe("decode-2026-01-01-210000");
    const dir = join(tmp, "stems");
    const a = await writeResult(dir, morning);
    const b = await writeResult(dir, evening);
    expect(a).not.toBe(b);
    expect(readdirSync(dir).sort()).toEqual([
      "decode-smoke-2026-01-01-090507.json",
      "decode-smoke-2026-01-01-210000.json",
    ]);
    // a result named by date only (older versions) is re-charted in place
    const old = join(dir, "decode-smoke-2026-01-01.json");
    renameSync(a, old);
    expect((await rechart(old)).file).toBe(old);
  });
  it("names the field that is wrong", () => {
    const bad = valid() as unknown as { runs: { metrics: { samples: unknown[] }[]; backend: string }[] };
    bad.runs[0].metrics[0].samples = [];
    bad.runs[0].backend = "tpu";
    expect(() => validateResult(bad, "r.json")).toThrow(BenchResultError);
    expect(() => validateResult(bad, "r.json")).toThrow(/r\.json.*runs\.0\.(backend|metrics\.0\.samples)/);
    expect(() => validateResult({ ...valid(), formatVersion: 2 })).toThrow(/formatVersion/);
  });
});

describe("per-package timing", () => {
  it("times every predict of every component through a wrapped backend", async () => {
    const { chain } = await writeHandoffPackages(tmp, 16, 2);
    const timer = new ComponentTimer();
    const backend = timedBackend(referenceBackend({ precision: "fp16" }), timer);
    const loaded = [];
    for (const p of chain) {
      loaded.push(
        await backend.load(p.path, { name: p.name, functionName: "main", io: p.io, sha256: p.sha256 }),
      );
    }
    expect(timer.loads.map((l) => l.component)).toEqual(["stage0", "stage1"]);
    let h: Tensor = tensor(
      "f16",
      [1, 1, 16],
      Uint16Array.from({ length: 16 }, () => f32ToF16Bits(1)),
    );
    for (let step = 0; step < 3; step++) {
      for (const l of loaded) h = (await l.predict({ x: h })).y;
      const events = timer.take();
      expect(events.map((e) => e.component)).toEqual(["stage0", "stage1"]);
      for (const e of events) expect(e.ms).toBeGreaterThanOrEqual(0);
    }
    expect(timer.take()).toEqual([]);
  });
});

describe("charts", () => {
  it("renders a sweep line chart to SVG and PNG", async () => {
    const svg = await renderSvg(
      vegaLiteSpec({
        kind: "line",
        name: "t",
        title: "ms per super-block vs context",
        rows: [
          { x: 128, backend: "a", median: 2, p10: 1.5, p90: 2.5 },
          { x: 256, backend: "a", median: 3, p10: 2.5, p90: 3.5 },
        ],
        x: "x",
        xTitle: "ctx",
        xType: "ordinal",
        y: "median",
        yTitle: "ms",
        color: "backend",
        lo: "p10",
        hi: "p90",
      }),
    );
    expect(svg).toContain("ms per super-block vs context");
    const png = svgToPng(svg);
    expect([...png.subarray(1, 4)].map((c) => String.fromCharCode(c)).join("")).toBe("PNG");
  });
});

describe("options", () => {
  it("refuses an unknown scenario and a bad token count, naming them", async () => {
    await expect(runScenario("warp")).rejects.toThrow(BenchOptionError);
    await expect(runScenario("warp")).rejects.toThrow(/unknown scenario "warp".*decode/);
    await expect(runScenario("decode", { tokens: 0 })).rejects.toThrow(/--tokens/);
  });
  it("the greedy margin is top-1 minus top-2, and absent for top-1 heads", () => {
    expect(top2Margin({ logits: Float32Array.of(0.5, 3, -1, 2.25) })).toBeCloseTo(0.75, 6);
    expect(top2Margin({ top1: { id: 3, value: 1 } })).toBeUndefined();
  });
  it("prompt ids are deterministic and inside the tokenizer's ordinary range", () => {
    expect(promptIds(6, 1024)).toEqual(promptIds(6, 1024));
    for (const id of promptIds(50, 248320)) expect(id >= 16 && id < 960).toBe(true);
  });
});

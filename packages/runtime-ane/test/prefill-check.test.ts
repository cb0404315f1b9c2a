import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { coreMLAvailability, hasNeuralEngine, type NativePlanOp } from "@anemll-qwen35/coreml";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { decidePrefill, type FunctionPlacement, placementOf } from "../src/function-check.js";
import {
  type Backend,
  ChainRunner,
  coreMLBackend,
  type FunctionCheckSeam,
  type LoadChainOptions,
  referenceBackend,
} from "../src/index.js";
import { PREFILL_CHECK_FILE } from "../src/prefill-check.js";

const FIXTURES = resolve(__dirname, "../../../fixtures");
const work = scratchDir("runtime-ane-prefill-check-");

const onAne = (
  component: string,
  fn: string,
  role: FunctionPlacement["role"],
  n = 100,
): FunctionPlacement => ({
  component,
  function: fn,
  role,
  ane: n,
  cpu: 0,
  gpu: 0,
  unplaced: 0,
  offAne: [],
});

describe("decidePrefill", () => {
  const placements = [onAne("sb0", "main", "decode"), onAne("sb0", "prefill_64", "prefill")];

  it("keeps prefill when every op is on the ANE and a call costs less per token than a decode step", () => {
    const d = decidePrefill({ placements, prefillMs: 320, decodeMs: 10, T: 64 });
    expect(d.keep).toBe(true);
    expect(d.reason).toMatch(
      /kept.*64 tokens in 320 ms \(5\.00 ms\/token\) vs 10\.0 ms per decode step \(2\.0× faster\)/,
    );
  });

  it("drops prefill when one op of a prefill function is off the ANE, naming it, however fast it is", () => {
    const off: FunctionPlacement = {
      ...onAne("sb1", "prefill_64", "prefill", 5479),
      gpu: 1,
      offAne: [{ name: "gdn_inv_3", type: "matmul", device: "GPU" }],
    };
    const d = decidePrefill({ placements: [...placements, off], prefillMs: 1, decodeMs: 10, T: 64 });
    expect(d.keep).toBe(false);
    expect(d.reason).toContain(
      "1 of 5480 ops of sb1's prefill_64 run off the ANE, e.g. gdn_inv_3 (matmul) on GPU",
    );
    // a decode function off the ANE is no reason to drop prefill
    const decodeOff = { ...onAne("sb0", "main", "decode"), cpu: 3 };
    expect(
      decidePrefill({ placements: [decodeOff, placements[1]], prefillMs: 64, decodeMs: 10, T: 64 }).keep,
    ).toBe(true);
  });

  it("drops prefill when it is not faster per token than decode", () => {
    const d = decidePrefill({ placements, prefillMs: 640, decodeMs: 10, T: 64 });
    expect(d.keep).toBe(false);
    expect(d.reason).toMatch(/slower per token than decode, 64 tokens in 640 ms \(10\.0 ms\/token\)/);
  });

  it("drops prefill when its placement could not be read or its call failed, saying why", () => {
    const unread: FunctionPlacement = { ...onAne("sb0", "prefill_64", "prefill", 0), error: "timed out" };
    const d = decidePrefill({ placements: [placements[0], unread], prefillMs: 1, decodeMs: 10, T: 64 });
    expect(d).toEqual({
      keep: false,
      reason: "prefill function dropped: where sb0's prefill_64 runs could not be read (timed out)",
    });
    const failed = decidePrefill({
      placements,
      prefillMs: Number.NaN,
      decodeMs: 10,
      T: 64,
      prefillError: "E_X: boom",
    });
    expect(failed.reason).toBe("prefill function dropped: a call failed (E_X: boom)");
  });

  it("decides on speed alone where no ANE placement is asked for, and drops what it could not time", () => {
    const off = { ...onAne("sb0", "prefill_64", "prefill"), cpu: 100, ane: 0 };
    expect(
      decidePrefill({ placements: [off], prefillMs: 64, decodeMs: 10, T: 64, requireAne: false }).keep,
    ).toBe(true);
    expect(decidePrefill({ placements: [off], prefillMs: 64, decodeMs: 10, T: 64 }).keep).toBe(false);
    expect(decidePrefill({ placements, prefillMs: Number.NaN, decodeMs: 10, T: 64 }).keep).toBe(false);
  });
});

describe("placementOf", () => {
  it("counts MLComputePlan's preferred devices, skipping constants and counting unplaced ops apart", () => {
    const op = (operatorName: string, preferred: NativePlanOp["preferred"], out = "x"): NativePlanOp => ({
      operatorName,
      outputs: [out],
      preferred,
      supported: [],
      cost: null,
    });
    const p = placementOf("sb0", "prefill_8", "prefill", [
      op("const", null),
      op("ios18.constexpr_lut_to_dense", "CPU"),
      op("ios18.conv", "ANE"),
      op("ios18.matmul", "ANE"),
      op("ios18.cast", "CPU", "cast_1"),
      op("ios18.gather", "GPU", "gather_2"),
      op("ios18.reshape", null),
    ]);
    expect(p).toMatchObject({ ane: 2, cpu: 1, gpu: 1, unplaced: 1 });
    expect(p.offAne).toEqual([
      { name: "cast_1", type: "cast", device: "CPU" },
      { name: "gather_2", type: "gather", device: "GPU" },
    ]);
  });
});

/**
 * The reference backend with a seam whose placements and timings the test chooses: the chain
 * itself runs for real, only what MLComputePlan and the clock would say is injected.
 */
function injected(o: {
  machine?: string;
  offAne?: (fn: { component: string; role: string }) => number;
  prefillMs: number;
  decodeMs: number;
}) {
  const log = {
    placements: [] as string[],
    timed: { prefill: 0, decode: 0 },
    loads: [] as (string | undefined)[],
  };
  const ref = referenceBackend();
  const functionCheck: FunctionCheckSeam = {
    machine: async () => ({ key: o.machine ?? "test machine · cpuAndNeuralEngine", requireAne: true }),
    async placement(_path, fn) {
      log.placements.push(`${fn.component}/${fn.functionName}/${fn.role}`);
      const off = o.offAne?.(fn) ?? 0;
      return { ...onAne(fn.component, fn.functionName, fn.role), gpu: off };
    },
    async time(what, run) {
      await run();
      log.timed[what]++;
      return what === "prefill" ? o.prefillMs : o.decodeMs;
    },
  };
  const backend: Backend = {
    name: ref.name,
    transfers: () => ref.transfers(),
    functionCheck,
    load: (path, opts) => {
      log.loads.push(opts.prefill?.function);
      return ref.load(path, opts);
    },
  };
  return { backend, log };
}

describe("the prefill check through the reference backend", () => {
  let source: string;
  beforeAll(async () => {
    source = join(work, "tiny-tied");
    await convert({
      model: join(FIXTURES, "tiny-tied"),
      out: source,
      ctx: 128,
      fuse: 1,
      lmHeadMaxRows: 512,
      prefillBatch: 8,
    });
  }, timeLimit(120_000));

  let n = 0;
  /** A fresh copy of the chain (the record lives in its folder). */
  const copy = () => {
    const dir = join(work, `copy-${n++}`);
    cpSync(source, dir, { recursive: true });
    return dir;
  };
  const load = (dir: string, backend: Backend, o: Omit<LoadChainOptions, "backend"> = {}) => {
    const events: { stage: string; message?: string }[] = [];
    return ChainRunner.load(dir, {
      ...o,
      backend,
      onProgress: (e) => events.push({ stage: e.stage, ...("message" in e ? { message: e.message } : {}) }),
    }).then((runner) => ({ runner, events }));
  };
  const prompt = Array.from({ length: 20 }, (_, i) => (i * 7 + 3) % 100);

  it("keeps a fast, all-ANE prefill, records it, and the next load reads the record and checks nothing", async () => {
    const dir = copy();
    const a = injected({ prefillMs: 8, decodeMs: 4 });
    const { runner, events } = await load(dir, a.backend);
    expect(runner.prefillCheck).toMatchObject({
      keep: true,
      source: "checked",
      T: 8,
      prefillMs: 8,
      decodeMs: 4,
    });
    expect(runner.prefillTokens).toBe(8);
    expect(a.log.timed).toEqual({ prefill: 1, decode: 8 });
    // every function loaded, the head's too
    const superblocks = runner.manifest.components.filter((c) => c.kind === "superblocks");
    expect(a.log.placements.filter((p) => p.endsWith("/prefill"))).toHaveLength(superblocks.length);
    expect(a.log.placements.filter((p) => p.endsWith("/decode"))).toHaveLength(superblocks.length);
    expect(a.log.placements.some((p) => p.endsWith("/head"))).toBe(true);
    expect(events.filter((e) => e.stage === "prefill-check")).toHaveLength(1);
    // the check left the chain at its start: the same logits as an unchecked load
    const checked = await runner.prefill(prompt);
    const plain = await ChainRunner.load(dir, { backend: referenceBackend(), prefillCheck: "off" });
    expect(plain.prefillCheck).toBeUndefined();
    expect(checked).toEqual(await plain.prefill(prompt));
    runner.dispose();
    plain.dispose();

    const record = JSON.parse(readFileSync(join(dir, PREFILL_CHECK_FILE), "utf8"));
    expect(record.checks).toHaveLength(1);
    expect(record.checks[0]).toMatchObject({ machine: "test machine · cpuAndNeuralEngine", keep: true });

    const b = injected({ prefillMs: 1e9, decodeMs: 1, offAne: () => 1 }); // would drop it if asked
    const again = await load(dir, b.backend);
    expect(again.runner.prefillCheck).toMatchObject({ keep: true, source: "recorded" });
    expect(again.runner.prefillTokens).toBe(8);
    expect(b.log.placements).toEqual([]);
    expect(b.log.timed).toEqual({ prefill: 0, decode: 0 });
    again.runner.dispose();
  });

  it("falls back once when a prefill op is off the ANE: loads again without the prefill functions, says why", async () => {
    const dir = copy();
    const a = injected({ prefillMs: 1, decodeMs: 4, offAne: (fn) => (fn.role === "prefill" ? 2 : 0) });
    const { runner, events } = await load(dir, a.backend);
    expect(runner.prefillCheck?.keep).toBe(false);
    expect(runner.prefillCheck?.reason).toMatch(
      /^prefill function dropped: 2 of 102 ops of .*run off the ANE/,
    );
    expect(runner.prefillTokens).toBeUndefined();
    // first with the prefill functions, then again without them
    const withPrefill = a.log.loads.filter((f) => f !== undefined).length;
    expect(withPrefill).toBeGreaterThan(0);
    expect(a.log.loads.slice(-withPrefill)).toEqual(new Array(withPrefill).fill(undefined));
    expect(events.filter((e) => e.stage === "prefill-check")).toHaveLength(1);
    const out = await runner.prefill(prompt);
    expect("logits" in out && out.logits.every(Number.isFinite)).toBe(true);
    runner.dispose();

    // the next load never loads a prefill function
    const b = injected({ prefillMs: 1, decodeMs: 4 });
    const again = await load(dir, b.backend);
    expect(again.runner.prefillCheck).toMatchObject({ keep: false, source: "recorded" });
    expect(b.log.loads.every((f) => f === undefined)).toBe(true);
    again.runner.dispose();

    // "recheck" checks again (and now keeps it); so does another machine
    const c = injected({ prefillMs: 1, decodeMs: 4 });
    const rechecked = await load(dir, c.backend, { prefillCheck: "recheck" });
    expect(rechecked.runner.prefillCheck).toMatchObject({ keep: true, source: "checked" });
    rechecked.runner.dispose();
    const d = injected({ prefillMs: 100, decodeMs: 4, machine: "another Mac" });
    const elsewhere = await load(dir, d.backend);
    expect(elsewhere.runner.prefillCheck).toMatchObject({ keep: false, source: "checked" });
    expect(elsewhere.runner.prefillCheck?.reason).toMatch(/slower per token than decode/);
    elsewhere.runner.dispose();
    const record = JSON.parse(readFileSync(join(dir, PREFILL_CHECK_FILE), "utf8"));
    expect(record.checks.map((r: { machine: string; keep: boolean }) => [r.machine, r.keep])).toEqual([
      ["another Mac", false],
      ["test machine · cpuAndNeuralEngine", true],
    ]);
  });

  it("falls back when MLComputePlan cannot read a prefill function, or a prefill call fails", async () => {
    const a = injected({ prefillMs: 1, decodeMs: 4 });
    const unreadable: Backend = {
      ...a.backend,
      functionCheck: {
        ...(a.backend.functionCheck as FunctionCheckSeam),
        placement: async (path, fn) => {
          if (fn.role === "prefill") throw new Error("MLComputePlan timed out");
          return (a.backend.functionCheck as FunctionCheckSeam).placement(path, fn);
        },
      },
    };
    const r = await load(copy(), unreadable);
    expect(r.runner.prefillCheck?.reason).toMatch(/could not be read \(MLComputePlan timed out\)$/);
    expect(r.runner.prefillTokens).toBeUndefined();
    r.runner.dispose();

    // a prefill function that throws when called: dropped, and decode still serves
    const b = injected({ prefillMs: 1, decodeMs: 4 });
    const broken: Backend = {
      ...b.backend,
      load: async (path, opts) => {
        const c = await b.backend.load(path, opts);
        if (!c.prefill) return c;
        const prefill = {
          ...c.prefill,
          predict: async () => {
            throw new Error("ANE program failed to load");
          },
        };
        return { ...c, newState: c.newState, predict: c.predict, dispose: c.dispose, prefill };
      },
    };
    const f = await load(copy(), broken);
    expect(f.runner.prefillCheck?.reason).toMatch(/a call failed \(.*ANE program failed to load\)/);
    expect(f.runner.prefillTokens).toBeUndefined();
    const out = await f.runner.prefill(prompt);
    expect("logits" in out && out.logits.every(Number.isFinite)).toBe(true);
    f.runner.dispose();
  });

  it("checks again after a new conversion (other package digests)", async () => {
    const dir = copy();
    const a = injected({ prefillMs: 100, decodeMs: 4 });
    (await load(dir, a.backend)).runner.dispose();
    const manifest = JSON.parse(readFileSync(join(dir, "model.json"), "utf8"));
    const record = JSON.parse(readFileSync(join(dir, PREFILL_CHECK_FILE), "utf8"));
    // the same record beside a chain whose packages differ
    record.checks[0].packages = "0".repeat(64);
    writeFileSync(join(dir, PREFILL_CHECK_FILE), JSON.stringify(record));
    const b = injected({ prefillMs: 1, decodeMs: 4 });
    const again = await load(dir, b.backend);
    expect(again.runner.prefillCheck?.source).toBe("checked");
    expect(b.log.placements.length).toBeGreaterThan(0);
    again.runner.dispose();
    expect(manifest.prefill.tokens).toBe(8);
  });

  it("says so and checks again when the record is unreadable or cannot be written", async () => {
    const dir = copy();
    writeFileSync(join(dir, PREFILL_CHECK_FILE), "{ not json");
    const a = injected({ prefillMs: 1, decodeMs: 4 });
    const { runner, events } = await load(dir, a.backend);
    expect(
      events.some((e) => e.stage === "notice" && /not a prefill-check record/.test(e.message ?? "")),
    ).toBe(true);
    expect(runner.prefillCheck?.source).toBe("checked");
    runner.dispose();

    // a record that cannot be written (a directory in its place: root or not, rename fails)
    const ro = copy();
    mkdirSync(join(ro, PREFILL_CHECK_FILE));
    const b = injected({ prefillMs: 1, decodeMs: 4 });
    const r = await load(ro, b.backend);
    expect(r.runner.prefillCheck?.keep).toBe(true);
    expect(
      r.events.some(
        (e) => e.stage === "notice" && /could not record the prefill check/.test(e.message ?? ""),
      ),
    ).toBe(true);
    r.runner.dispose();
  });

  it("does nothing with prefillCheck off, with prefillFunction false, or on a backend without a seam", async () => {
    const dir = copy();
    const a = injected({ prefillMs: 1e9, decodeMs: 1 });
    const off = await load(dir, a.backend, { prefillCheck: "off" });
    expect(off.runner.prefillCheck).toBeUndefined();
    expect(off.runner.prefillTokens).toBe(8);
    off.runner.dispose();
    const decodeOnly = await load(dir, a.backend, { prefillFunction: false });
    expect(decodeOnly.runner.prefillCheck).toBeUndefined();
    decodeOnly.runner.dispose();
    expect(a.log.placements).toEqual([]);
    const plain = await load(dir, referenceBackend());
    expect(plain.runner.prefillCheck).toBeUndefined();
    plain.runner.dispose();
    expect(() => readFileSync(join(dir, PREFILL_CHECK_FILE))).toThrow();
  });
});

const coreml = coreMLAvailability();

describe("the Core ML backend's seam (a Mac)", () => {
  it.skipIf(!coreml.available)(
    `reads MLComputePlan for every function, times prefill against decode, and records the verdict${coreml.available ? "" : ` (skipped: ${coreml.reason})`}`,
    async () => {
      const dir = join(work, "coreml");
      await convert({
        model: join(FIXTURES, "tiny-tied"),
        out: dir,
        ctx: 128,
        fuse: 1,
        lmHeadMaxRows: 512,
        prefillBatch: 8,
      });
      const notices: string[] = [];
      const runner = await ChainRunner.load(dir, {
        backend: coreMLBackend({ onNotice: (m) => notices.push(m) }),
        onProgress: (e) => {
          if (e.stage === "notice") notices.push(e.message);
        },
      });
      const r = runner.prefillCheck;
      expect(r?.source).toBe("checked");
      const blocks = runner.manifest.components.filter((c) => c.kind === "superblocks").length;
      expect(r?.placements.filter((p) => p.role === "prefill")).toHaveLength(blocks);
      for (const p of r?.placements ?? []) expect(p.error, p.function).toBeUndefined();
      for (const p of r?.placements ?? []) expect(p.ane + p.cpu + p.gpu).toBeGreaterThan(0);
      expect(r?.prefillMs).toBeGreaterThan(0);
      expect(r?.decodeMs).toBeGreaterThan(0);
      expect(runner.prefillTokens).toBe(r?.keep ? 8 : undefined);
      // a virtual Mac (hosted CI runners) has no Neural Engine: the backend says so, speed decides
      if (!(await hasNeuralEngine())) {
        expect(notices.some((m) => /no Neural Engine/.test(m))).toBe(true);
        if (r?.keep) expect(r.reason).toMatch(/no ANE placement asked for/);
      }
      runner.dispose();
      const again = await ChainRunner.load(dir, { backend: coreMLBackend() });
      expect(again.prefillCheck).toMatchObject({ source: "recorded", keep: r?.keep });
      again.dispose();
    },
    timeLimit(600_000),
  );
});

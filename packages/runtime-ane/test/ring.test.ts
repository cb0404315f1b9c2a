/**
 * --context-overflow ring: past the converted ctx, KV row p mod ctx (after the sink rows), the
 * GatedDeltaNet state carried over the whole history. Checked against an independent numpy
 * forward written for this test (test/oracle/window_reference.py: attention over the sinks and
 * the most recent ctx − sinks tokens, the recurrence over everything), itself checked against the
 * Hugging Face golden logits when the window holds the whole prompt.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { loadGolden, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { ChainRunner, referenceBackend } from "../src/index.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
const PYTHON = resolve(__dirname, "../../../.venv/bin/python");
const ORACLE = resolve(__dirname, "oracle/window_reference.py");
const CTX = 128;
const plain = { body: { kind: "none" }, lmHead: { kind: "none" }, embed: { kind: "none" } } as const;

/** The numpy reference's logits for positions from `from` on. */
function reference(ids: number[], ctx: number, sinks: number, from: number): Float32Array[] {
  const out = execFileSync(PYTHON, [ORACLE], {
    input: JSON.stringify({ checkpoint: FIXTURE, ids, ctx, sinks, from }),
    maxBuffer: 256 * 1024 * 1024,
  });
  return (JSON.parse(out.toString()).logits as number[][]).map((r) => Float32Array.from(r));
}

// 140 prompt tokens (past ctx 128), then 6 decode steps: outputs at positions 139..145
const prompt = Array.from({ length: 140 }, (_, i) => 16 + ((i * 131 + 7) % 900));
const tail = [40, 41, 300, 512, 77, 8];
const ids = [...prompt, ...tail];

async function ringOutputs(dir: string, sinks: number): Promise<Float32Array[]> {
  const model = await ChainRunner.load(dir, {
    backend: referenceBackend({ precision: "fp32" }),
    contextOverflow: "ring",
    ringSinks: sinks,
  });
  const outs: Float32Array[] = [];
  const logits = (o: Awaited<ReturnType<ChainRunner["decode"]>>) => {
    if (!("logits" in o)) throw new Error("expected logits");
    return o.logits;
  };
  outs.push(logits(await model.prefill(prompt)));
  const snap = await model.snapshot(); // past ctx: every row of the ring
  for (const t of tail) outs.push(logits(await model.decode(t)));
  expect(model.position).toBe(ids.length);
  // a wrapped ring restores bit for bit too
  await model.restore(snap);
  expect(model.position).toBe(prompt.length);
  for (const [i, t] of tail.slice(0, 2).entries()) expect(logits(await model.decode(t))).toEqual(outs[i + 1]);
  model.dispose();
  return outs;
}

const python = existsSync(PYTHON);

describe.skipIf(!python)(
  `ring-buffer KV past the context${python ? "" : " — skipped: no .venv/bin/python (numpy)"}`,
  () => {
    const dirs: Record<string, string> = {};
    beforeAll(async () => {
      const work = mkdtempSync(join(tmpdir(), "runtime-ane-ring-"));
      dirs.io = join(work, "io");
      dirs.mlstate = join(work, "mlstate");
      await convert({ model: FIXTURE, out: dirs.io, ctx: CTX, fuse: "all", dtype: "fp32", ...plain });
      await convert({
        model: FIXTURE,
        out: dirs.mlstate,
        ctx: CTX,
        fuse: "all",
        dtype: "fp32",
        state: "mlstate",
        ...plain,
      });
    }, timeLimit(180_000));

    it(
      "the numpy reference reproduces the Hugging Face goldens when the window holds everything",
      async () => {
        const g = await loadGolden(FIXTURE);
        const ref = reference(g.promptIds, 4096, 0, 0);
        let worst = 0;
        for (let i = 0; i < ref.length; i++) worst = Math.max(worst, maxAbsDiff(ref[i], g.promptLogits[i]));
        expect(worst).toBeLessThan(2e-4);
      },
      timeLimit(120_000),
    );

    for (const [kind, sinks] of [
      ["io", 4],
      ["mlstate", 0],
    ] as const) {
      it(
        `${kind} KV, ${sinks} sinks: runs past ctx and matches sliding-window attention + full GDN history`,
        async () => {
          const got = await ringOutputs(dirs[kind], sinks);
          const want = reference(ids, CTX, sinks, prompt.length - 1);
          expect(got).toHaveLength(want.length);
          let worst = 0;
          for (let i = 0; i < got.length; i++) worst = Math.max(worst, maxAbsDiff(got[i], want[i]));
          expect(worst).toBeLessThan(1e-3);
          // and the window matters: full attention over all 146 tokens says something else
          const full = reference(ids, 4096, 0, prompt.length - 1);
          expect(Math.max(...got.map((g, i) => maxAbsDiff(g, full[i])))).toBeGreaterThan(1e-2);
        },
        timeLimit(300_000),
      );
    }
  },
);

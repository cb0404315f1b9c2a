/**
 * ChainRunner.snapshot() / restore(): a restored state continues bit for bit like the state it was
 * copied from, for io KV and mlstate KV, in fp32 and fp16-emulated mode.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type ConvertOptions, convert } from "@anemll-qwen35/converter";
import { SnapshotMismatchError, type StepOutput } from "@anemll-qwen35/generate";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { ChainRunner, referenceBackend } from "../src/index.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");
const work = mkdtempSync(join(tmpdir(), "runtime-ane-snapshot-"));
const plain = { body: { kind: "none" }, lmHead: { kind: "none" }, embed: { kind: "none" } } as const;

async function converted(name: string, opts: Partial<ConvertOptions>): Promise<string> {
  const out = join(work, name);
  await convert({ model: FIXTURE, out, ctx: 128, fuse: 1, lmHeadMaxRows: 512, ...plain, ...opts });
  return out;
}

/** The bits of an output (logits as raw float32 words, or the top-1 pair). */
function bits(out: StepOutput): number[] {
  if ("top1" in out) return [out.top1.id, out.top1.value];
  return Array.from(new Uint32Array(out.logits.buffer, out.logits.byteOffset, out.logits.length));
}

async function continueWith(model: ChainRunner, tokens: readonly number[]): Promise<number[][]> {
  const outs: number[][] = [];
  for (const t of tokens) outs.push(bits(await model.decode(t)));
  return outs;
}

const prompt = Array.from({ length: 21 }, (_, i) => 3 + ((i * 37) % 900));
const tail = [17, 230, 5, 811, 64, 2];

describe("ChainRunner snapshot / restore", () => {
  const dirs: Record<string, string> = {};
  beforeAll(async () => {
    dirs.io = await converted("io", {});
    dirs.mlstate = await converted("mlstate", { state: "mlstate", dtype: "fp32" });
  }, timeLimit(120_000));

  for (const [kind, precision] of [
    ["io", "fp16"],
    ["io", "fp32"],
    ["mlstate", "fp32"],
  ] as const) {
    it(`continues bit-identically after restore (${kind} KV, ${precision} mode)`, async () => {
      const model = await ChainRunner.load(dirs[kind], { backend: referenceBackend({ precision }) });
      await model.prefill(prompt);
      const snap = await model.snapshot();
      expect(snap.position).toBe(prompt.length);
      expect(snap.bytes).toBeGreaterThan(0);
      const uninterrupted = await continueWith(model, tail);

      // wander off: other tokens, a reset and another prompt, then come back
      await continueWith(model, [9, 9, 9]);
      model.reset();
      await model.prefill([400, 401, 402, 403]);
      await model.restore(snap);
      expect(model.position).toBe(prompt.length);
      expect(await continueWith(model, tail)).toEqual(uninterrupted);

      // a snapshot stays usable after a restore
      await model.restore(snap);
      expect(await continueWith(model, tail.slice(0, 2))).toEqual(uninterrupted.slice(0, 2));
      model.dispose();
    });
  }

  it("matches a run that was never interrupted, from a fresh runner", async () => {
    const a = await ChainRunner.load(dirs.io, { backend: referenceBackend({ precision: "fp16" }) });
    const b = await ChainRunner.load(dirs.io, { backend: referenceBackend({ precision: "fp16" }) });
    await a.prefill(prompt.slice(0, 10));
    const snap = await a.snapshot();
    await a.prefill(prompt.slice(10));
    await a.restore(snap);
    await a.prefill(prompt.slice(10));
    // the same chunks as a (a prefill function's chunks round differently from one long chunk)
    await b.prefill(prompt.slice(0, 10));
    await b.prefill(prompt.slice(10));
    expect(await continueWith(a, tail)).toEqual(await continueWith(b, tail));
  });

  it("refuses a snapshot of another runner, or one that was disposed", async () => {
    const a = await ChainRunner.load(dirs.io, { backend: referenceBackend() });
    const b = await ChainRunner.load(dirs.io, { backend: referenceBackend() });
    await a.prefill(prompt.slice(0, 4));
    const snap = await a.snapshot();
    await expect(b.restore(snap)).rejects.toThrow(SnapshotMismatchError);
    snap.dispose();
    await expect(a.restore(snap)).rejects.toThrow(/disposed/);
  });
});

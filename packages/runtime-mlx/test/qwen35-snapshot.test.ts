/**
 * MlxQwen35.snapshot() / restore(): a restored state continues bit for bit like the state it was
 * copied from, with the pipeline on or off, across KV cache growth, in float32 and bfloat16.
 */
import { SnapshotMismatchError } from "@anemll-qwen35/generate";
import { expect, it } from "vitest";
import { loadMlxModel, type MlxQwen35 } from "../src/index.js";
import { fixtureDir, logitsOf } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

const prompt = Array.from({ length: 19 }, (_, i) => 3 + ((i * 37) % 900));
const tail = [17, 230, 5, 811, 64, 2, 99, 100];

async function continueWith(model: MlxQwen35, tokens: readonly number[]): Promise<number[][]> {
  const outs: number[][] = [];
  for (const t of tokens) {
    const l = logitsOf(await model.decode(t));
    outs.push(Array.from(new Uint32Array(l.buffer, l.byteOffset, l.length)));
  }
  return outs;
}

describeMlx("MlxQwen35 snapshot / restore", () => {
  for (const [dtype, pipeline, kvStep] of [
    ["float32", "auto", 256],
    ["float32", true, 8],
    ["bfloat16", false, 4],
  ] as const) {
    it(`continues bit-identically after restore (${dtype}, pipeline ${pipeline}, KV step ${kvStep})`, async () => {
      await using model = await loadMlxModel(fixtureDir("tiny-gqa"), {
        dtype,
        pipeline,
        kvCache: { step: kvStep },
      });
      await model.prefill(prompt);
      const snap = await model.snapshot();
      expect(snap.position).toBe(prompt.length);
      expect(snap.bytes).toBeGreaterThan(0);
      const uninterrupted = await continueWith(model, tail);

      // wander off (the KV caches grow and are rewritten), reset, another prompt, then come back
      await continueWith(model, [9, 9, 9, 9, 9]);
      model.reset();
      await model.prefill([400, 401, 402, 403, 404, 405, 406, 407, 408, 409]);
      await model.restore(snap);
      expect(model.position).toBe(prompt.length);
      expect(await continueWith(model, tail)).toEqual(uninterrupted);

      // the snapshot is unchanged by the run that followed the restore
      await model.restore(snap);
      expect(await continueWith(model, tail.slice(0, 3))).toEqual(uninterrupted.slice(0, 3));
      snap.dispose();
      await expect(model.restore(snap)).rejects.toThrow(/disposed/);
    });
  }

  it("matches an uninterrupted run of another model, and refuses a snapshot of another model", async () => {
    await using a = await loadMlxModel(fixtureDir("tiny-gqa"), { dtype: "float32" });
    await using b = await loadMlxModel(fixtureDir("tiny-gqa"), { dtype: "float32" });
    await a.prefill(prompt.slice(0, 7));
    const snap = await a.snapshot();
    await a.prefill(prompt.slice(7));
    await a.restore(snap);
    await a.prefill(prompt.slice(7));
    await b.prefill(prompt);
    expect(await continueWith(a, tail)).toEqual(await continueWith(b, tail));
    await expect(b.restore(snap)).rejects.toThrow(SnapshotMismatchError);
  });
});

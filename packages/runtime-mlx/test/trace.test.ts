/** traceMlx: one pass over a sequence, every position's logits and the hidden state after chosen layers. */
import { expect, it } from "vitest";
import { loadMlxModel, traceMlx } from "../src/index.js";
import { fixtureDir, maxAbsDiff, readGolden } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

describeMlx("traceMlx", () => {
  for (const name of ["tiny-gqa", "tiny-moe"] as const) {
    it(`${name}: logits and hidden states match HF's prompt logits and output_hidden_states`, async () => {
      const golden = readGolden(name);
      await using model = await loadMlxModel(fixtureDir(name), { dtype: "float32" });
      const L = model.config.numHiddenLayers;
      const D = model.config.hiddenSize;
      const T = golden.promptIds.length;
      const trace = await traceMlx(model, golden.promptIds, [1, L - 1]);
      expect(trace.logits.length).toBe(T * model.config.vocabSize);
      expect(maxAbsDiff(trace.logits, golden.promptLogits)).toBeLessThan(1e-3);
      expect(trace.hidden.map((h) => h.length)).toEqual([T * D, T * D]);
      // [L + 1, T, D]: entry n is the output of layer n − 1
      expect(maxAbsDiff(trace.hidden[0], golden.hiddenStates, T * D)).toBeLessThan(2e-4);
      expect(maxAbsDiff(trace.hidden[1], golden.hiddenStates, (L - 1) * T * D)).toBeLessThan(2e-4);
      // its own state: the model's sequence has not moved
      expect(model.position).toBe(0);
      await expect(traceMlx(model, golden.promptIds, [L + 1])).rejects.toThrow(/from 1 to/);
      await expect(traceMlx(model, [model.config.vocabSize], [1])).rejects.toThrow(/not in \[0,/);
    });
  }
});

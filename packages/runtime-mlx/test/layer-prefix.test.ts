/** The first N layers on their own: their hidden state is Hugging Face's after layer N−1. */
import { expect, it } from "vitest";
import { loadMlxModel, MlxLayerPrefix } from "../src/index.js";
import { fixtureDir, maxAbsDiff, readGolden } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

describeMlx("MlxLayerPrefix", () => {
  for (const name of ["tiny-tied", "tiny-moe"] as const) {
    it(`${name}: the hidden state after N layers matches HF output_hidden_states[N], token by token`, async () => {
      const golden = readGolden(name);
      await using model = await loadMlxModel(fixtureDir(name), { dtype: "float32" });
      const L = model.config.numHiddenLayers;
      const D = model.config.hiddenSize;
      const T = golden.promptIds.length;
      for (const n of [1, 4, L - 1]) {
        const prefix = new MlxLayerPrefix(model, n);
        for (let t = 0; t < T; t++) {
          const h = await prefix.step(golden.promptIds[t]);
          expect(h.length).toBe(D);
          // [L + 1, T, D]: entry n is the output of layer n − 1
          expect(maxAbsDiff(h, golden.hiddenStates, (n * T + t) * D), `n=${n} t=${t}`).toBeLessThan(2e-4);
        }
        expect(prefix.position).toBe(T);
        prefix.reset();
        const again = await prefix.step(golden.promptIds[0]);
        expect(maxAbsDiff(again, golden.hiddenStates, n * T * D)).toBeLessThan(2e-4);
        prefix.dispose();
        await expect(prefix.step(0)).rejects.toThrow(/disposed/);
      }
      expect(() => new MlxLayerPrefix(model, L)).toThrow(/from 1 to/);
    });
  }
});

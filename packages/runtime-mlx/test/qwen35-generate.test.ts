/**
 * End to end through packages/generate: the fixture tokenizer, the chat template, the generate()
 * loop and its greedy sampler drive the MLX model; the tokens must be the golden (HF) ones.
 */
import { generate, loadTokenizer } from "@anemll-qwen35/generate";
import { expect, it } from "vitest";
import { loadMlxModel } from "../src/index.js";
import { FIXTURES, fixtureDir, readGolden } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

describeMlx("Qwen3.5 on MLX through generate()", () => {
  for (const name of FIXTURES) {
    it(`${name}: greedy generation gives the golden ids`, async () => {
      const golden = readGolden(name);
      const tokenizer = await loadTokenizer(fixtureDir(name));
      await using model = await loadMlxModel(fixtureDir(name), { dtype: "float32" });
      const messages = golden.json.prompt.messages as { role: "user"; content: string }[] | null;
      const result = await generate(model, tokenizer, {
        // the chat fixture goes through the template (thinking off, as its prompt was rendered)
        ...(golden.json.prompt.chat_template && messages
          ? { messages, enableThinking: false }
          : { prompt: golden.promptIds }),
        maxTokens: golden.generatedIds.length,
        eosTokenIds: [],
        sampling: { temperature: 0 },
      });
      expect(result.stats.promptTokens).toBe(golden.promptIds.length);
      expect(result.tokenIds).toEqual(golden.generatedIds);
      expect(result.finishReason).toBe("length");
      expect(result.stats.decodeSteps).toBe(golden.generatedIds.length - 1);
      expect(model.position).toBe(golden.promptIds.length + golden.generatedIds.length - 1);
    });
  }
});

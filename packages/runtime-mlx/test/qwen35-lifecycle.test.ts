/**
 * Bad input and lifecycle: typed errors naming the tensor for broken checkpoints, use after dispose,
 * double dispose, bad ids, concurrent calls, context overflow, abort, and MLX memory that stays flat
 * over 1,000 decode steps.
 */
import { rmSync } from "node:fs";
import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { ContextOverflowError, generate, loadTokenizer } from "@anemll-qwen35/generate";
import { WeightError } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadMlxModel, ModelBusyError, ModelDisposedError, mx } from "../src/index.js";
import { argmax, copyFixture, fixtureDir, logitsOf, readGolden, tempDir } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

describeMlx("Qwen3.5 on MLX: broken checkpoints", () => {
  let tmp: string;
  beforeAll(() => {
    tmp = tempDir("broken");
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  const broken = async (label: string, edit: Parameters<typeof copyFixture>[2]) => {
    const dir = copyFixture("tiny-gqa", join(tmp, label), edit);
    return (await loadMlxModel(dir).catch((e: unknown) => e)) as WeightError;
  };
  /** Loading the fixture with tensor `name` replaced by `mx.zeros(...zeros)`. */
  const replaced = (label: string, name: string, ...zeros: Parameters<typeof mx.zeros>) =>
    broken(label, (t) => {
      t.get(name)!.dispose();
      t.set(name, mx.zeros(...zeros));
    });

  it("a missing tensor", async () => {
    const name = "model.language_model.layers.1.linear_attn.in_proj_z.weight";
    const error = await broken("missing", (t) => {
      t.get(name)!.dispose();
      t.delete(name);
    });
    expect(error).toBeInstanceOf(WeightError);
    expect(error.code).toBe("E_WEIGHT");
    expect(error.tensor).toBe(name);
    expect(error.message).toContain(`missing tensor "${name}" (expected shape [512, 128])`);
  });

  it("a mis-shaped tensor", async () => {
    const name = "model.language_model.layers.3.self_attn.q_proj.weight";
    const error = await replaced("misshaped", name, [512, 128], "bfloat16");
    expect(error).toBeInstanceOf(WeightError);
    expect(error.tensor).toBe(name);
    expect(error.message).toContain(`tensor "${name}" has shape [512, 128], expected [1024, 128]`);
  });

  it("a tensor of the wrong dtype", async () => {
    const name = "model.language_model.layers.0.mlp.down_proj.weight";
    const error = await replaced("dtype", name, [128, 256], "int32");
    expect(error).toBeInstanceOf(WeightError);
    expect(error.tensor).toBe(name);
    expect(error.message).toContain(`tensor "${name}" is i32, expected one of bf16, f16, f32`);
  });
});

describeMlx("Qwen3.5 on MLX: lifecycle", () => {
  const golden = readGolden("tiny-tied");

  it("use after dispose throws ModelDisposedError; dispose twice is a no-op; await using disposes", async () => {
    const model = await loadMlxModel(fixtureDir("tiny-tied"), { dtype: "float32" });
    await model.prefill(golden.promptIds);
    model.dispose();
    expect(model.disposed).toBe(true);
    expect(() => model.dispose()).not.toThrow();
    await expect(model.decode(1)).rejects.toBeInstanceOf(ModelDisposedError);
    await expect(model.prefill([1, 2])).rejects.toThrow(/prefill: the model has been disposed/);
    expect(() => model.reset()).toThrow(ModelDisposedError);
    let escaped: typeof model | undefined;
    {
      await using scoped = await loadMlxModel(fixtureDir("tiny-tied"), { dtype: "float32" });
      escaped = scoped;
      expect(scoped.disposed).toBe(false);
    }
    expect(escaped.disposed).toBe(true);
  });

  it("bad ids, concurrent calls and a full context are refused with typed errors", async () => {
    await using model = await loadMlxModel(fixtureDir("tiny-tied"), { dtype: "float32", contextLength: 20 });
    await expect(model.prefill([])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(model.prefill([1, 2, 1024])).rejects.toThrow(
      /token id 1024 at index 2 is not an integer in \[0, 1024\)/,
    );
    await expect(model.decode(-1)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(model.position).toBe(0);
    const overflow = (await model
      .prefill(new Array(21).fill(5))
      .catch((e: unknown) => e)) as ContextOverflowError;
    expect(overflow).toBeInstanceOf(ContextOverflowError);
    expect(overflow).toMatchObject({ promptTokens: 21, contextLength: 20 });
    const first = model.prefill(golden.promptIds);
    await expect(model.decode(3)).rejects.toBeInstanceOf(ModelBusyError);
    await first;
    for (let i = golden.promptIds.length; i < 20; i++) await model.decode(3);
    expect(model.position).toBe(20);
    await expect(model.decode(3)).rejects.toBeInstanceOf(ContextOverflowError);
    model.reset();
    expect(model.position).toBe(0);
    expect(argmax(logitsOf(await model.prefill(golden.promptIds)))).toBe(golden.generatedIds[0]);
  });

  it("an aborted signal stops prefill with an AbortError, and generate() resolves with finishReason abort", async () => {
    await using model = await loadMlxModel(fixtureDir("tiny-tied"), { dtype: "float32", prefillChunk: 4 });
    const already = new AbortController();
    already.abort();
    await expect(model.prefill(golden.promptIds, { signal: already.signal })).rejects.toMatchObject({
      name: "AbortError",
    });
    // abort while the prefill is under way (between its 4-token chunks)
    const during = new AbortController();
    const pending = model.prefill(golden.promptIds, { signal: during.signal });
    during.abort();
    await expect(pending).rejects.toMatchObject({ name: "AbortError" });

    const tokenizer = await loadTokenizer(fixtureDir("tiny-tied"));
    const controller = new AbortController();
    let seen = 0;
    const result = await generate(model, tokenizer, {
      prompt: golden.promptIds,
      maxTokens: 12,
      signal: controller.signal,
      onToken: () => {
        if (++seen === 3) controller.abort();
      },
    });
    expect(result.finishReason).toBe("abort");
    expect(result.tokenIds.length).toBeGreaterThanOrEqual(3);
    expect(result.tokenIds.length).toBeLessThan(12);
    expect(result.tokenIds).toEqual(golden.generatedIds.slice(0, result.tokenIds.length));
  });

  it(
    "active memory stays flat over 1,000 decode steps (preallocated KV cache)",
    async () => {
      await using model = await loadMlxModel(fixtureDir("tiny-tied"), {
        dtype: "float32",
        contextLength: 1100,
        kvCache: { preallocate: true },
      });
      let token = argmax(logitsOf(await model.prefill(golden.promptIds)));
      let at100 = 0;
      let state100 = 0;
      for (let step = 1; step <= 1000; step++) {
        token = argmax(logitsOf(await model.decode(token)));
        if (step === 100) {
          at100 = mx.getActiveMemory();
          state100 = model.memory().stateBytes;
        }
      }
      const at1000 = mx.getActiveMemory();
      expect(model.memory().stateBytes).toBe(state100); // the cache was allocated once
      // a few kB of slack for one step's temporaries; 900 leaked steps would be megabytes
      expect(Math.abs(at1000 - at100)).toBeLessThan(64 * 1024);
    },
    timeLimit(240_000),
  ); // 1,000 steps: ~15 s on an idle 2-core machine, several times that on a loaded one
});

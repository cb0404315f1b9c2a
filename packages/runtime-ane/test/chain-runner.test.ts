import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type ConvertOptions, convert } from "@anemll-qwen35/converter";
import { ContextOverflowError, generate, loadTokenizer } from "@anemll-qwen35/generate";
import { ChainIntegrityError, ChainManifestError } from "@anemll-qwen35/ir/chain";
import { argmax, cosine, loadGolden, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { ChainLoadError, ChainRunner, type LoadChainOptions, referenceBackend } from "../src/index.js";

const FIXTURES = resolve(__dirname, "../../../fixtures");
const work = mkdtempSync(join(tmpdir(), "runtime-ane-"));

async function converted(name: string, opts: Partial<ConvertOptions>): Promise<string> {
  const out = join(work, `${name}-${Object.values(opts).join("-")}`);
  await convert({ model: join(FIXTURES, name), out, ctx: 128, fuse: 1, lmHeadMaxRows: 512, ...opts });
  return out;
}

/** The chain on the reference backend. */
function open(
  dir: string,
  o: { precision?: "fp32" | "fp16" } & Omit<LoadChainOptions, "backend"> = {},
): Promise<ChainRunner> {
  return ChainRunner.load(dir, { ...o, backend: referenceBackend({ precision: o.precision }) });
}

const plain = { body: { kind: "none" }, lmHead: { kind: "none" }, embed: { kind: "none" } } as const;

describe("ChainRunner on the reference backend", () => {
  let fp32Dir: string;
  let fp16Dir: string;
  beforeAll(async () => {
    fp32Dir = await converted("tiny-tied", { ...plain, dtype: "fp32" });
    fp16Dir = await converted("tiny-tied", { ...plain });
  }, timeLimit(120_000));

  it("reproduces the Hugging Face golden logits and greedy tokens (fp32 conversion, fp32 mode)", async () => {
    const g = await loadGolden(join(FIXTURES, "tiny-tied"));
    const model = await open(fp32Dir, { precision: "fp32" });
    const first = await model.prefill(g.promptIds);
    if (!("logits" in first)) throw new Error("expected logits");
    expect(maxAbsDiff(first.logits, g.promptLogits.at(-1)!)).toBeLessThan(1e-3);
    let worst = 0;
    for (let i = 0; i < g.decodeLogits.length; i++) {
      const out = await model.decode(g.generatedIds[i]);
      if (!("logits" in out)) throw new Error("expected logits");
      worst = Math.max(worst, maxAbsDiff(out.logits, g.decodeLogits[i]));
      expect(argmax(out.logits)).toBe(g.generatedIds[i + 1]);
    }
    expect(worst).toBeLessThan(1e-3);
    expect(model.position).toBe(g.promptIds.length + g.decodeLogits.length);
  });

  it("prefills through the packages' prefill function (one call per package and chunk) with the decode-only chain's logits", async () => {
    const g = await loadGolden(join(FIXTURES, "tiny-tied"));
    const decodeOnly = await converted("tiny-tied", { ...plain, dtype: "fp32", prefillBatch: 0 });
    const batched = await converted("tiny-tied", { ...plain, dtype: "fp32", prefillBatch: 8 });
    const prompt = [...g.promptIds, ...g.generatedIds.slice(0, 5)]; // 21 tokens: 2 chunks of 8, then a masked 5
    const runs: { logits: Float32Array; predictions: number; prefillTokens: number | undefined }[] = [];
    for (const dir of [decodeOnly, batched]) {
      const backend = referenceBackend({ precision: "fp32" });
      const model = await ChainRunner.load(dir, { backend });
      const out = await model.prefill(prompt);
      if (!("logits" in out)) throw new Error("expected logits");
      runs.push({
        logits: out.logits,
        predictions: backend.transfers().predictions,
        prefillTokens: model.prefillTokens,
      });
      expect(model.position).toBe(prompt.length);
      const next = await model.decode(argmax(out.logits)); // decode continues from the prefilled state
      if (!("logits" in next)) throw new Error("expected logits");
      expect(argmax(next.logits)).toBe(g.generatedIds[6]);
      model.dispose();
    }
    const [one, chunked] = runs;
    const packages = 2; // fuse 1: two super-block packages
    expect(one.prefillTokens).toBeUndefined();
    expect(one.predictions).toBe(prompt.length * packages + 1);
    expect(chunked.prefillTokens).toBe(8);
    expect(chunked.predictions).toBe(3 * packages + 1); // ⌈21 / 8⌉ calls per package, one lm_head
    expect(maxAbsDiff(chunked.logits, one.logits)).toBeLessThan(1e-4);
    expect(maxAbsDiff(chunked.logits, g.decodeLogits[4])).toBeLessThan(1e-3);
  });

  it("keeps greedy tokens and cosine ≥ 0.999 with the fp16 program in fp16 mode", async () => {
    const g = await loadGolden(join(FIXTURES, "tiny-tied"));
    const model = await open(fp16Dir, { precision: "fp16" });
    const first = await model.prefill(g.promptIds);
    if (!("logits" in first)) throw new Error("expected logits");
    expect(argmax(first.logits)).toBe(g.generatedIds[0]);
    for (let i = 0; i < g.decodeLogits.length; i++) {
      const out = await model.decode(g.generatedIds[i]);
      if (!("logits" in out)) throw new Error("expected logits");
      expect(argmax(out.logits)).toBe(g.generatedIds[i + 1]);
      expect(cosine(out.logits, g.decodeLogits[i])).toBeGreaterThan(0.999);
    }
  });

  it("streams the golden text through generate() with the chain's tokenizer", async () => {
    const g = await loadGolden(join(FIXTURES, "tiny-tied"));
    const model = await open(fp32Dir);
    const tokenizer = await loadTokenizer(fp32Dir, { eosTokenIds: model.manifest.tokenizer.eosTokenIds });
    const gen = generate(model, tokenizer, { prompt: g.promptIds, maxTokens: g.generatedIds.length });
    const streamed: number[] = [];
    for await (const chunk of gen) streamed.push(...(chunk.type === "text" ? chunk.tokenIds : []));
    const result = await gen;
    expect(result.stats.generatedTokens).toBe(g.generatedIds.length);
    expect(streamed).toEqual(g.generatedIds);
    expect(result.stats.decodeTokensPerSecond).toBeGreaterThan(0);
  });

  it("merges an argmax head and runs mlstate KV to the same tokens", async () => {
    const g = await loadGolden(join(FIXTURES, "tiny-tied"));
    const dir = await converted("tiny-tied", { ...plain, dtype: "fp32", argmax: true, state: "mlstate" });
    const model = await open(dir);
    expect(model.outputKind).toBe("top1");
    let out = await model.prefill(g.promptIds);
    for (let i = 0; i < 6; i++) {
      if (!("top1" in out)) throw new Error("expected top1");
      expect(out.top1.id).toBe(g.generatedIds[i]);
      out = await model.decode(g.generatedIds[i]);
    }
    model.reset();
    expect(model.position).toBe(0);
    const again = await model.prefill(g.promptIds);
    expect("top1" in again && again.top1.id).toBe(g.generatedIds[0]);
  });

  it("refuses a prompt longer than the context, or slides the window when asked", async () => {
    const model = await open(fp32Dir);
    const long = Array.from({ length: 129 }, (_, i) => 100 + (i % 50));
    await expect(model.prefill(long)).rejects.toThrow(ContextOverflowError);
    const sliding = await open(fp32Dir, { contextOverflow: "slide", slideKeep: 0.25 });
    const out = await sliding.prefill(long);
    expect("logits" in out).toBe(true);
    expect(sliding.position).toBe(32);
  });

  it("gives clear errors for a bad model folder", async () => {
    const bad = mkdtempSync(join(work, "bad-"));
    await expect(open(bad)).rejects.toThrow(ChainManifestError);
    writeFileSync(join(bad, "model.json"), "{not json");
    await expect(open(bad)).rejects.toThrow(/not valid JSON/);
    const m = JSON.parse(readFileSync(join(fp32Dir, "model.json"), "utf8"));
    writeFileSync(join(bad, "model.json"), JSON.stringify({ ...m, ctx: "big" }));
    await expect(open(bad)).rejects.toThrow(/ctx/);
    writeFileSync(join(bad, "model.json"), JSON.stringify({ ...m, formatVersion: 2, components: "changed" }));
    await expect(open(bad)).rejects.toThrow(
      /format version 2 \(written by converter .+\) is newer than this runtime/,
    );
    writeFileSync(join(bad, "model.json"), JSON.stringify(m));
    await expect(open(bad)).rejects.toThrow(/^embed \(embed\.mlpackage\): the package is missing/);
    await expect(open(bad, { verify: false })).rejects.toThrow(ChainLoadError);
    rmSync(bad, { recursive: true });
  });

  it("checks each package against model.json's sha256, once per change (digests cached)", async () => {
    const dir = join(work, "corrupt");
    cpSync(fp32Dir, dir, { recursive: true });
    const cacheFile = join(work, "digests.json");
    const hashed: string[] = [];
    const load = () =>
      open(dir, {
        verify: { cacheFile },
        onProgress: (e) => e.stage === "verify" && hashed.push(e.component),
      });
    (await load()).dispose();
    expect(hashed).toEqual(["embed", "sb_00", "sb_01", "lm_head"]);
    (await load()).dispose();
    expect(hashed).toHaveLength(4); // the second load only looked at sizes and times
    // one flipped byte in sb_01's weights
    const weights = join(dir, "sb_01.mlpackage", "Data", "com.apple.CoreML", "weights");
    const blob = join(weights, readdirSync(weights)[0]);
    const bytes = readFileSync(blob);
    bytes[bytes.length - 7] ^= 0xff;
    writeFileSync(blob, bytes);
    const err = await load().catch((e) => e);
    expect(err).toBeInstanceOf(ChainIntegrityError);
    expect(err.component).toBe("sb_01");
    expect(err.message).toMatch(
      /^sb_01 \(sb_01\.mlpackage\): the package is corrupt or was changed after conversion/,
    );
    expect(hashed.at(-1)).toBe("sb_01");
    rmSync(dir, { recursive: true });
  });

  it("refuses a model.json whose ctx or EOS ids disagree with its packages, at load", async () => {
    const bad = mkdtempSync(join(work, "edited-"));
    const m = JSON.parse(readFileSync(join(fp32Dir, "model.json"), "utf8"));
    writeFileSync(join(bad, "model.json"), JSON.stringify({ ...m, ctx: 4096 }));
    await expect(open(bad)).rejects.toThrow(/ctx 4096 disagrees with component embed, built for 128 tokens/);
    writeFileSync(
      join(bad, "model.json"),
      JSON.stringify({ ...m, tokenizer: { ...m.tokenizer, eosTokenIds: [m.model.vocabSize] } }),
    );
    await expect(open(bad)).rejects.toThrow(/eosTokenIds: \d+ is outside the vocabulary/);
    rmSync(bad, { recursive: true });
  });
});

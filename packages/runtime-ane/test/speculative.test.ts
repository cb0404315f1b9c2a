/**
 * Speculative decoding on the chain with fixtures/tiny-trained's learned MTP head: greedy
 * speculation (draft γ with the head, verify [next, …drafts] in one call of the packages' verify
 * functions, accept the longest prefix the trunk agrees with) gives token for token what plain
 * greedy decoding gives — across prefill chunk edges, from a restored prompt-cache snapshot, and
 * in ring mode past the context (where the verify rows no longer fit and the chain falls back to
 * decode with a rollback) — for every γ the conversion allows, with KV as I/O and as a Core ML state,
 * and over context buckets (speculation runs at the bucket its tokens need and moves up mid-round).
 */
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type ConvertOptions, convert } from "@anemll-qwen35/converter";
import type { StepOutput } from "@anemll-qwen35/generate";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { beforeAll, describe, expect, it } from "vitest";
import { ChainRunner, type LoadChainOptions, referenceBackend } from "../src/index.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-trained");
const CTX = 128;
const PREFILL = 8;
const K = 3;

const argmax = (o: StepOutput): number => {
  if ("top1" in o) return o.top1.id;
  let best = 0;
  for (let i = 1; i < o.logits.length; i++) if (o.logits[i] > o.logits[best]) best = i;
  return best;
};

/** Plain greedy: n tokens after the prompt (from `start`, the prompt's output). */
async function plainGreedy(m: ChainRunner, start: StepOutput, n: number): Promise<number[]> {
  const out: number[] = [];
  let next = argmax(start);
  while (out.length < n) {
    out.push(next);
    next = argmax(await m.decode(next));
  }
  return out;
}

/** Greedy speculation with γ drafts a round (the contract's rule); returns tokens and rounds. */
async function specGreedy(m: ChainRunner, start: StepOutput, n: number, gamma: number) {
  const out: number[] = [];
  let next = argmax(start);
  let rounds = 0;
  let accepted = 0;
  while (out.length < n) {
    out.push(next);
    const { ids } = await m.draft(next, gamma, (o) => argmax(o));
    const rows = await m.verify([next, ...ids]);
    let a = 0;
    while (a < ids.length && argmax(rows[a]) === ids[a]) a++;
    await m.accept(a + 1);
    out.push(...ids.slice(0, a));
    next = argmax(rows[a]);
    rounds++;
    accepted += a;
  }
  return { tokens: out.slice(0, n), rounds, accepted };
}

const prompt = (n: number, seed: number) =>
  Array.from({ length: n }, (_, i) => 16 + ((i * 131 + seed * 17) % 3900));

const work = scratchDir("runtime-ane-spec-");

/** tiny-trained with its MTP head (k = 3), fp32 without quantization, prefill T = 8, in work/name. */
async function convertForSpeculation(name: string, o: Partial<ConvertOptions>): Promise<string> {
  const out = join(work, name);
  const base = {
    model: FIXTURE,
    out,
    dtype: "fp32",
    quant: "none",
    prefillBatch: PREFILL,
    verifyTokens: K,
  } as const;
  await convert({ ...base, workers: 1, ...o });
  return out;
}

const load = (dir: string, o: Partial<LoadChainOptions> = {}) =>
  ChainRunner.load(dir, { backend: referenceBackend({ precision: "fp32" }), ...o });

describe("greedy speculation with the MTP head is plain greedy decoding", () => {
  const dirs: Record<string, string> = {};
  beforeAll(async () => {
    for (const state of ["io", "mlstate"] as const)
      dirs[state] = await convertForSpeculation(state, { ctx: CTX, state });
  }, 600_000);

  for (const state of ["io", "mlstate"] as const) {
    it(`${state}: prompts across prefill chunk edges, γ = 1 … ${K}`, async () => {
      const plainModel = await load(dirs[state]);
      const spec = await load(dirs[state], { speculative: true });
      expect(plainModel.maxDraftTokens).toBe(0);
      expect(spec.maxDraftTokens).toBe(K);
      // 5: one masked chunk; 8: one full chunk; 13: a chunk and a masked one; 17: two and a token
      let accepted = 0;
      let rejected = 0;
      for (const [i, len] of [5, 8, 13, 17].entries()) {
        const ids = prompt(len, i);
        plainModel.reset();
        const want = await plainGreedy(plainModel, await plainModel.prefill(ids), 16);
        for (let gamma = 1; gamma <= K; gamma++) {
          spec.reset();
          const got = await specGreedy(spec, await spec.prefill(ids), 16, gamma);
          expect(got.tokens, `prompt ${len}, γ ${gamma}`).toEqual(want);
          accepted += got.accepted;
          rejected += got.rounds * gamma - got.accepted;
        }
      }
      // both paths of accept() ran: drafts were taken and drafts were refused
      expect(accepted).toBeGreaterThan(0);
      expect(rejected).toBeGreaterThan(0);
      plainModel.dispose();
      spec.dispose();
    }, 600_000);
  }

  it("from a restored prompt-cache snapshot, and a decode step between rounds", async () => {
    const plainModel = await load(dirs.io);
    const spec = await load(dirs.io, { speculative: true });
    const ids = prompt(11, 5);
    const want = await plainGreedy(plainModel, await plainModel.prefill(ids), 24);
    const first = await spec.prefill(ids);
    const snap = await spec.snapshot();
    const a = await specGreedy(spec, first, 24, 2);
    // a snapshot taken after speculation restores its provisional head rows and its row selection
    await spec.restore(snap);
    const b = await specGreedy(spec, first, 24, 3);
    expect(a.tokens).toEqual(want);
    expect(b.tokens).toEqual(want);
    // after speculating, a plain prefill of more tokens continues from the accepted state
    spec.reset();
    const mid = await specGreedy(spec, await spec.prefill(ids), 6, 2);
    const more = [7, 300, 41];
    plainModel.reset();
    await plainModel.prefill(ids);
    for (const t of mid.tokens) await plainModel.decode(t);
    const wantMore = await plainGreedy(plainModel, await plainModel.prefill(more), 8);
    spec.reset();
    await spec.prefill(ids);
    for (const t of mid.tokens) await spec.decode(t);
    expect(await specGreedy(spec, await spec.prefill(more), 8, 3).then((r) => r.tokens)).toEqual(wantMore);
    plainModel.dispose();
    spec.dispose();
  }, 600_000);

  it("ring mode past the context", async () => {
    const plainModel = await load(dirs.io, { contextOverflow: "ring" });
    const spec = await load(dirs.io, { contextOverflow: "ring", speculative: true });
    const ids = prompt(110, 3);
    const want = await plainGreedy(plainModel, await plainModel.prefill(ids), 40); // to position 150
    const got = await specGreedy(spec, await spec.prefill(ids), 40, 3);
    expect(got.tokens).toEqual(want);
    plainModel.dispose();
    spec.dispose();
  }, 600_000);

  it("refuses what the contract rules out", async () => {
    const spec = await load(dirs.io, { speculative: true });
    await expect(spec.draft(5, 1, argmax)).rejects.toThrow(/prefill first/);
    await spec.prefill(prompt(4, 1));
    await expect(spec.draft(5, K + 1, argmax)).rejects.toThrow(/gamma/);
    await expect(spec.accept(1)).rejects.toThrow(/without a verify/);
    const rows = await spec.verify([5, 6]);
    expect(rows).toHaveLength(2);
    await expect(spec.accept(3)).rejects.toThrow(/accept takes 1 … 2/);
    const plainModel = await load(dirs.io);
    // a prefill drops a verify nobody accepted: the state is where it was before it
    await plainModel.prefill(prompt(4, 1));
    expect(argmax(await spec.prefill([7, 8]))).toBe(argmax(await plainModel.prefill([7, 8])));
    expect(spec.position).toBe(6);
    await expect(plainModel.draft(5, 1, argmax)).rejects.toMatchObject({ code: "E_SPECULATIVE_UNSUPPORTED" });
    spec.dispose();
    plainModel.dispose();
  }, 600_000);
});

describe("speculation over context buckets", () => {
  const dirs: Record<string, string> = {};
  beforeAll(async () => {
    for (const state of ["io", "mlstate"] as const)
      dirs[state] = await convertForSpeculation(`buckets-${state}`, { buckets: [128, 256], state });
    // the same chain as a converter before per-bucket verify functions wrote it: verify at the
    // largest bucket only (model.json's table without verify entries; `verify` names that one)
    dirs.old = join(work, "buckets-old");
    cpSync(dirs.io, dirs.old, { recursive: true });
    const file = join(dirs.old, "model.json");
    const m = JSON.parse(readFileSync(file, "utf8"));
    for (const c of m.components)
      if (c.functions) c.functions = c.functions.filter((f: { family: string }) => f.family !== "verify");
    writeFileSync(file, JSON.stringify(m, null, 2));
  }, 600_000);

  for (const state of ["io", "mlstate"] as const) {
    it(`${state}: starts at the small bucket, moves up mid-generation, and gives plain greedy's tokens`, async () => {
      const plainModel = await load(dirs[state]);
      const spec = await load(dirs[state], { speculative: true });
      const functions = readChainManifest(dirs[state]).then((m) =>
        m.components
          .filter((c) => c.kind === "superblocks")
          .flatMap((c) => (c.functions ?? []).map((f) => f.function)),
      );
      expect(await functions).toEqual(expect.arrayContaining(["verify_128", "verify_256"]));
      expect(spec.bucket).toBe(128);
      const ids = prompt(100, 7);
      const want = await plainGreedy(plainModel, await plainModel.prefill(ids), 48); // to position 148
      const first = await spec.prefill(ids);
      expect(spec.bucket).toBe(128);
      const snap = await spec.snapshot();
      const got = await specGreedy(spec, first, 48, K);
      expect(got.tokens).toEqual(want);
      expect(got.accepted).toBeGreaterThan(0);
      expect(spec.bucket).toBe(256);
      // a snapshot of the small bucket restores there and speculates across the edge again
      await spec.restore(snap);
      expect(spec.bucket).toBe(128);
      expect((await specGreedy(spec, first, 48, 2)).tokens).toEqual(want);
      plainModel.dispose();
      spec.dispose();
    }, 600_000);
  }

  it("a chain whose table has no verify functions speculates at its largest bucket", async () => {
    const spec = await load(dirs.old, { speculative: true });
    expect(spec.bucket).toBe(256);
    const plainModel = await load(dirs.old);
    const ids = prompt(40, 2);
    const want = await plainGreedy(plainModel, await plainModel.prefill(ids), 16);
    expect((await specGreedy(spec, await spec.prefill(ids), 16, K)).tokens).toEqual(want);
    expect(spec.bucket).toBe(256);
    plainModel.dispose();
    spec.dispose();
  }, 600_000);
});

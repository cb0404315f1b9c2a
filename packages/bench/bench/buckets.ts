/**
 * Context buckets (issue 25 items 1, 2), on fixtures/tiny-trained in one run:
 *   - decode cost per bucket: costplan's estimate of each bucket's decode function (M4 Pro, the
 *     super-block packages summed) and the interpreter's median ms per decode step at positions
 *     that sit in each bucket, against the same positions on a single-ctx conversion (ctx 2048);
 *   - a 1,000-token prompt through the prefill functions against token by token (ms and the
 *     largest |Δlogit|);
 *   - the reload that `dropPrefill` costs a next turn (prefill functions loaded again);
 *   - greedy speculation (generate() with the MTP head, γ 2) at a short context: verify functions
 *     per bucket against verify at the largest bucket only (the table converters before per-bucket
 *     verify wrote), decode tok/s and costplan's estimate of each verify function.
 * The default conversion (buckets 256/1024/2048 for tiny-trained) against --ctx 2048, fp16
 * program, fp32 interpreter. Writes packages/bench/results/buckets-<date>.json.
 *
 *   pnpm --filter @anemll-qwen35/bench exec tsx bench/buckets.ts
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { costplan } from "@anemll-qwen35/costplan";
import { generate, loadTokenizer } from "@anemll-qwen35/generate";
import { ChainRunner, type LoadChainOptions, referenceBackend } from "@anemll-qwen35/runtime-ane";

const FIXTURE = resolve(import.meta.dirname, "../../../fixtures/tiny-trained");
const RESULTS = resolve(import.meta.dirname, "../results");
const work = mkdtempSync(join(tmpdir(), "bench-buckets-"));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const ids = (n: number, seed = 1) => Array.from({ length: n }, (_, i) => ((i * 131 + seed * 17) % 500) + 3);
const logits = (o: object) => (o as { logits: Float32Array }).logits;
const open = (dir: string, o: Omit<LoadChainOptions, "backend"> = {}) =>
  ChainRunner.load(dir, { ...o, backend: referenceBackend({ precision: "fp32" }) });

const bucketed = join(work, "default");
const single = join(work, "ctx2048");
const t0 = performance.now();
const { manifest } = await convert({ model: FIXTURE, out: bucketed, workers: 1 });
await convert({ model: FIXTURE, out: single, ctx: 2048, workers: 1 });
console.log(`converted in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

// costplan: each function's estimate, summed over the super-block packages
const plan = await costplan(bucketed, { native: "off", chip: "m4-pro" });
const perFunction = new Map<string, number>();
for (const p of plan.packages.filter((x) => x.name.startsWith("sb_")))
  for (const f of p.functions)
    perFunction.set(f.name, (perFunction.get(f.name) ?? 0) + f.summary.estimatedMs);

// the interpreter: decode steps at positions inside each bucket, bucketed and single-ctx in turn
// (alternating steps, so that a busy machine slows both alike)
const STEPS = 16;
const positions = [200, 700, 1500];
const decode = [];
for (const position of positions) {
  const runners = [await open(bucketed), await open(single)];
  for (const m of runners) await m.prefill(ids(position));
  const times: number[][] = [[], []];
  for (let i = 0; i < STEPS; i++) {
    for (const [k, m] of runners.entries()) {
      const t = performance.now();
      await m.decode(i + 3);
      times[k].push(performance.now() - t);
    }
  }
  const [b, s] = times.map(median);
  const row = {
    position,
    bucket: runners[0].bucket,
    costplanMs: perFunction.get(`decode_${runners[0].bucket}`),
    costplanMsSingle: perFunction.get("decode_2048"),
    interpreterMs: b,
    interpreterMsSingle: s,
    ratio: b / s,
  };
  for (const m of runners) m.dispose();
  decode.push(row);
  console.log(JSON.stringify(row));
}

// a 1,000-token prompt: prefill functions vs token by token (same chain)
const prompt = ids(1000, 5);
const chunkedRunner = await open(bucketed);
let t = performance.now();
const a = logits(await chunkedRunner.prefill(prompt));
const chunkedMs = performance.now() - t;
const chunkedCalls = chunkedRunner.backend.transfers().predictions;
const tbtRunner = await open(bucketed, { prefillFunction: false });
t = performance.now();
const b = logits(await tbtRunner.prefill(prompt));
const tbtMs = performance.now() - t;
let maxAbs = 0;
for (let i = 0; i < a.length; i++) maxAbs = Math.max(maxAbs, Math.abs(a[i] - b[i]));
const prefill = {
  tokens: prompt.length,
  prefillMs: chunkedMs,
  tokenByTokenMs: tbtMs,
  speedup: tbtMs / chunkedMs,
  prefillTokPerSec: (prompt.length / chunkedMs) * 1000,
  tokenByTokenTokPerSec: (prompt.length / tbtMs) * 1000,
  predictions: chunkedCalls,
  maxAbsLogitDiff: maxAbs,
};
console.log(JSON.stringify(prefill));
chunkedRunner.dispose();
tbtRunner.dispose();

// dropPrefill: a next turn of 64 tokens after a prompt, with and without the reload
async function nextTurnMs(dropPrefill: boolean): Promise<number> {
  const times: number[] = [];
  const m = await open(bucketed, { dropPrefill });
  await m.prefill(ids(100));
  for (let i = 0; i < 3; i++) {
    await m.decode(7);
    const s = performance.now();
    await m.prefill(ids(64, i + 2));
    times.push(performance.now() - s);
  }
  m.dispose();
  return median(times);
}
const kept = await nextTurnMs(false);
const dropped = await nextTurnMs(true);
const reload = { turnTokens: 64, keptMs: kept, droppedMs: dropped, reloadMs: dropped - kept };
console.log(JSON.stringify(reload));

// speculation at a short context: per-bucket verify functions vs the largest bucket's only
const pinned = join(work, "verify-largest-only");
cpSync(bucketed, pinned, { recursive: true });
const table = JSON.parse(readFileSync(join(pinned, "model.json"), "utf8"));
for (const c of table.components)
  if (c.functions) c.functions = c.functions.filter((f: { family: string }) => f.family !== "verify");
writeFileSync(join(pinned, "model.json"), JSON.stringify(table, null, 2));
// generate() with the MTP head, greedy, as a user's speculative run goes (the first round's draft
// also runs the head over the prompt: the same work for both chains)
const tokenizer = await loadTokenizer(bucketed);
const SPEC_TOKENS = 64;
const specRunners = [await open(bucketed, { speculative: true }), await open(pinned, { speculative: true })];
const specRates: number[][] = [[], []];
const acceptance: number[] = [];
const generated: number[] = [];
let identical = true;
for (let r = 0; r < 3; r++) {
  const runs = [];
  for (const [k, m] of specRunners.entries()) {
    const res = await generate(m, tokenizer, {
      prompt: ids(32, r + 7),
      maxTokens: SPEC_TOKENS,
      sampling: { temperature: 0 },
      speculative: "mtp",
      gamma: 2,
    });
    const spec = res.stats.speculative;
    if (!spec) throw new Error("generate() did not speculate");
    specRates[k].push(res.stats.decodeTokensPerSecond);
    if (k === 0) acceptance.push(spec.acceptanceRate);
    generated.push(res.stats.generatedTokens);
    runs.push(res.tokenIds.join());
  }
  identical &&= runs[0] === runs[1];
}
const speculation = {
  prompt: 32,
  maxTokens: SPEC_TOKENS,
  generatedTokens: generated,
  gamma: 2,
  acceptanceRate: median(acceptance),
  bucket: specRunners[0].bucket,
  bucketVerifyLargestOnly: specRunners[1].bucket,
  tokS: median(specRates[0]),
  tokSVerifyLargestOnly: median(specRates[1]),
  ratio: median(specRates[0]) / median(specRates[1]),
  identicalTokens: identical,
  costplanVerifyMs: perFunction.get(`verify_${specRunners[0].bucket}`),
  costplanVerifyMsLargest: perFunction.get(`verify_${specRunners[1].bucket}`),
};
for (const m of specRunners) m.dispose();
console.log(JSON.stringify(speculation));

const result = {
  schema: "anemll-qwen35.bench.buckets",
  date: new Date().toISOString(),
  fixture: "tiny-trained",
  buckets: manifest.buckets,
  note: "fp16 program, fp32 reference interpreter (Linux CPU); costplan: static estimate on m4-pro, super-block packages summed",
  costplanMsPerFunction: Object.fromEntries(perFunction),
  decode,
  prefill,
  dropPrefillReload: reload,
  speculation,
};
mkdirSync(RESULTS, { recursive: true });
const file = join(RESULTS, `buckets-${result.date.slice(0, 10)}.json`);
writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
console.log(`→ ${file}`);

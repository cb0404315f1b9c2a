/**
 * Speculative decoding on the chain, measured: fixtures/tiny-trained converted with its MTP head
 * (verify functions of 5 rows), run on the reference backend (the interpreter), greedy. For held-out
 * prompts (the Ruth verses of golden-mtp.safetensors, each tokenized alone) it decodes N tokens
 * plainly and with γ = 1 … 4 drafts a round, checks the tokens agree, and reports per γ the
 * acceptance rate, mean accepted drafts and tokens per verify call, and decode tok/s (median over
 * the prompts, with its ratio to the plain decode of the same run). On the interpreter every call
 * costs its FLOPs, not its weight reads, so the tok/s ratio is not the ANE's (costplan's
 * projection, bench/speculative-projection.ts, is). Writes bench/results/speculative-chain.json.
 *
 *   pnpm --filter @anemll-qwen35/bench exec tsx bench/speculative-chain.ts [prompts] [tokens]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import type { StepOutput } from "@anemll-qwen35/generate";
import { SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import { ChainRunner, referenceBackend } from "@anemll-qwen35/runtime-ane";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const RESULTS = fileURLToPath(new URL("../results/", import.meta.url));
const PROMPTS = Number(process.argv[2] ?? 8);
const TOKENS = Number(process.argv[3] ?? 32);
const K = 4;

const argmax = (o: StepOutput): number => {
  if ("top1" in o) return o.top1.id;
  let best = 0;
  for (let i = 1; i < o.logits.length; i++) if (o.logits[i] > o.logits[best]) best = i;
  return best;
};
const median = (v: number[]) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function ruthPrompts(): Promise<number[][]> {
  await using f = await SafetensorsFile.open(join(ROOT, "fixtures/tiny-trained/golden-mtp.safetensors"));
  const ids = Array.from((await f.read("ruth_ids")).data as BigInt64Array, Number);
  const offsets = Array.from((await f.read("ruth_offsets")).data as BigInt64Array, Number);
  const lengths = Array.from((await f.read("ruth_prompt_lengths")).data as BigInt64Array, Number);
  return lengths.slice(0, PROMPTS).map((n, i) => ids.slice(offsets[i], offsets[i] + n));
}

const work = mkdtempSync(join(tmpdir(), "bench-spec-"));
try {
  const dir = join(work, "chain");
  await convert({
    model: join(ROOT, "fixtures/tiny-trained"),
    out: dir,
    ctx: 256,
    prefillBatch: 16,
    verifyTokens: K,
  });
  const backend = referenceBackend({ precision: "fp32" });
  const plain = await ChainRunner.load(dir, { backend });
  const spec = await ChainRunner.load(dir, { backend, speculative: true });
  const prompts = await ruthPrompts();
  const plainRates: number[] = [];
  const plainTokens: number[][] = [];
  for (const p of prompts) {
    plain.reset();
    let next = argmax(await plain.prefill(p));
    const out: number[] = [];
    const t0 = performance.now();
    while (out.length < TOKENS) {
      out.push(next);
      next = argmax(await plain.decode(next));
    }
    plainRates.push((1000 * TOKENS) / (performance.now() - t0));
    plainTokens.push(out);
  }
  const rows = [];
  for (let gamma = 1; gamma <= K; gamma++) {
    let drafted = 0;
    let accepted = 0;
    let calls = 0;
    let identical = true;
    const rates: number[] = [];
    for (const [i, p] of prompts.entries()) {
      spec.reset();
      let next = argmax(await spec.prefill(p));
      const out: number[] = [];
      const t0 = performance.now();
      while (out.length < TOKENS) {
        out.push(next);
        const { ids } = await spec.draft(next, gamma, (o) => argmax(o));
        const verified = await spec.verify([next, ...ids]);
        let a = 0;
        while (a < gamma && argmax(verified[a]) === ids[a]) a++;
        await spec.accept(a + 1);
        out.push(...ids.slice(0, a));
        next = argmax(verified[a]);
        drafted += gamma;
        accepted += a;
        calls++;
      }
      rates.push((1000 * TOKENS) / (performance.now() - t0));
      identical &&= out.slice(0, TOKENS).join() === plainTokens[i].join();
    }
    const row = {
      gamma,
      acceptanceRate: accepted / drafted,
      meanAccepted: accepted / calls,
      tokensPerCall: (accepted + calls) / calls,
      tokS: median(rates),
      plainTokS: median(plainRates),
      ratio: median(rates) / median(plainRates),
      identicalToPlain: identical,
    };
    rows.push(row);
    console.log(
      `γ ${gamma}: acceptance ${(100 * row.acceptanceRate).toFixed(1)} %, ${row.meanAccepted.toFixed(2)} accepted / call, ${row.tokensPerCall.toFixed(2)} tok / call; ${row.tokS.toFixed(1)} tok/s vs plain ${row.plainTokS.toFixed(1)} (×${row.ratio.toFixed(2)}); identical: ${identical}`,
    );
  }
  plain.dispose();
  spec.dispose();
  await mkdir(RESULTS, { recursive: true });
  const result = {
    fixture: "tiny-trained",
    backend: "reference fp32",
    prompts: prompts.length,
    tokens: TOKENS,
    rows,
  };
  await writeFile(join(RESULTS, "speculative-chain.json"), `${JSON.stringify(result, null, 2)}\n`);
  console.log(`wrote ${join(RESULTS, "speculative-chain.json")}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}

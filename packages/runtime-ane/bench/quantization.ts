/**
 * Weight quantization judged on learned weights. fixtures/tiny-trained (a 7.2M-parameter Qwen3.5
 * trained on the King James Bible by tools/oracle/train_tiny.py) is converted once per entry of
 * ENCODINGS and run on the reference backend in fp16 mode (every fp16 result rounded, subnormals
 * flushed, as the ANE does), teacher-forced over the first 512 positions of the held-out Book of
 * Ruth (never trained on) and compared with Hugging Face fp32 logits for the same tokens:
 *   - top-1: share of positions whose arg-max equals HF's;
 *   - top-5: mean |top5(q) ∩ top5(HF)| / 5;
 *   - KL: mean KL(HF ‖ q) of the next-token distributions, in nats;
 *   - ppl: perplexity of the held-out text under the quantized model (HF fp32's is printed too);
 *   - loops: share of free greedy generations (PROMPTS held-out verse openings, GEN_TOKENS each)
 *     that end in a repetition loop (the last LOOP_SPAN tokens repeat with a period ≤ LOOP_PERIOD).
 * Every row is also measured on the other fixtures against their Hugging Face goldens (KL and
 * top-1, teacher-forced over the prompt and the golden greedy continuation): tiny-tied and
 * tiny-gqa (random weights: their LUT numbers say how much an encoding perturbs, not how a real
 * model fares), and tiny-moe is listed as skipped (the ANE converter refuses MoE checkpoints).
 * A new configuration is one more entry in ENCODINGS — a converter policy (`quant`) or the
 * body/lmHead shorthands. The HF logits come with the fixtures (heldout.safetensors, made by
 * train_tiny.py; golden.safetensors), so this needs no Python.
 *
 *   pnpm --filter @anemll-qwen35/runtime-ane exec tsx bench/quantization.ts [--jobs 2] [--only name,name] [--tokens 512]
 * --jobs N measures N rows at a time, each in its own process.
 * Writes bench/results/quantization.json and prints the tables that notes/quantization.md shows.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  type ConvertOptions,
  convert,
  parseWeightQuant,
  planComponents,
  planQuant,
  resolveQuantSpec,
  specRules,
} from "@anemll-qwen35/converter";
import { toFloat32 } from "@anemll-qwen35/core";
import { loadTokenizer } from "@anemll-qwen35/generate";
import { argmax, loadGolden, parseQwen35Config, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import { argValue, benchMachine, publishedConfigJson } from "@anemll-qwen35/testkit";
import { ChainRunner, referenceBackend } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const FIXTURES = join(here, "..", "..", "..", "fixtures");
const FIXTURE = join(FIXTURES, "tiny-trained");
/** Fixtures measured against their goldens besides tiny-trained's held-out text. */
const GOLDEN_FIXTURES = ["tiny-tied", "tiny-gqa", "tiny-moe"];

const q = parseWeightQuant;
const PROPOSAL = "lut4,gdn.in_proj_qkv=lut6,gdn.out_proj=lut6,gdn.in_proj_a=none,gdn.in_proj_b=none";
/** One row each. `options` go to convert() as they are (dtype fp16 and the converter's defaults otherwise). */
const ENCODINGS: { name: string; options: Partial<ConvertOptions>; precision?: "fp32" }[] = [
  {
    name: "fp32 program, fp32 interpreter (check)",
    options: { dtype: "fp32", body: q("none"), lmHead: q("none") },
    precision: "fp32",
  },
  { name: "fp16", options: { body: q("none"), lmHead: q("none") } },
  // body alone (lm_head fp16)
  { name: "body lut4", options: { body: q("lut4"), lmHead: q("none") } },
  { name: "body lut4,4", options: { body: q("lut4,4"), lmHead: q("none") } },
  { name: "body lut4,16", options: { body: q("lut4,16"), lmHead: q("none") } },
  { name: "body lut6", options: { body: q("lut6"), lmHead: q("none") } },
  { name: "body lut8", options: { body: q("lut8"), lmHead: q("none") } },
  { name: "body int8", options: { body: q("int8"), lmHead: q("none") } },
  // lm_head alone (body fp16)
  { name: "head lut4", options: { body: q("none"), lmHead: q("lut4") } },
  { name: "head lut4,4", options: { body: q("none"), lmHead: q("lut4,4") } },
  { name: "head lut4,16", options: { body: q("none"), lmHead: q("lut4,16") } },
  { name: "head lut6", options: { body: q("none"), lmHead: q("lut6") } },
  { name: "head lut8", options: { body: q("none"), lmHead: q("lut8") } },
  { name: "head int8", options: { body: q("none"), lmHead: q("int8") } },
  // whole-model combinations
  { name: "lut4 body + lut6 head", options: { body: q("lut4"), lmHead: q("lut6") } },
  { name: "lut4 body + lut4 head", options: { body: q("lut4"), lmHead: q("lut4") } },
  { name: "lut6 body + lut6 head", options: { body: q("lut6"), lmHead: q("lut6") } },
  { name: "lut6 body + lut4 head", options: { body: q("lut6"), lmHead: q("lut4") } },
  { name: "int8 body + int8 head", options: { body: q("int8"), lmHead: q("int8") } },
  // per-tensor policies (converter presets and rules: packages/converter README "Quantization policy");
  // PROPOSAL is the hot-path issue's: GDN in_proj_a/b fp16, in_proj_qkv/out_proj LUT6, MLP and
  // attention (and the GDN gate in_proj_z) LUT4, head LUT6
  { name: "policy proposal", options: { quant: PROPOSAL } },
  { name: "policy proposal, head lut4", options: { quant: `${PROPOSAL},lm_head=lut4` } },
  { name: "policy proposal, attn lut6", options: { quant: `${PROPOSAL},attn=lut6` } },
  { name: "policy proposal, mlp lut6", options: { quant: `${PROPOSAL},mlp=lut6` } },
  { name: "policy lut4, gdn a/b fp16", options: { quant: "lut4,gdn.in_proj_a=none,gdn.in_proj_b=none" } },
  { name: "policy lut6, gdn a/b fp16", options: { quant: "lut6,gdn.in_proj_a=none,gdn.in_proj_b=none" } },
  { name: "policy lut6, mlp lut4", options: { quant: "lut6,mlp=lut4" } },
  { name: "policy lut6, attn lut4", options: { quant: "lut6,attn=lut4" } },
];

const TOKENS = Number(argValue("--tokens") ?? 512);
const PROMPTS = 8; // free generations, from the openings of evenly spaced held-out verses
const PROMPT_TOKENS = 6;
const GEN_TOKENS = 32;
const LOOP_SPAN = 16;
const LOOP_PERIOD = 8;

function logSoftmax(x: Float32Array): Float64Array {
  let m = Number.NEGATIVE_INFINITY;
  for (const v of x) m = Math.max(m, v);
  let s = 0;
  for (const v of x) s += Math.exp(v - m);
  const lse = m + Math.log(s);
  return Float64Array.from(x, (v) => v - lse);
}

function topK(x: Float32Array, k: number): number[] {
  return Array.from(x.keys())
    .sort((a, b) => x[b] - x[a])
    .slice(0, k);
}

/** True when the last LOOP_SPAN tokens repeat with some period p ≤ LOOP_PERIOD. */
export function endsInLoop(tokens: readonly number[]): boolean {
  if (tokens.length < LOOP_SPAN) return false;
  const tail = tokens.slice(-LOOP_SPAN);
  for (let p = 1; p <= LOOP_PERIOD; p++) {
    if (tail.every((t, i) => i < p || t === tail[i - p])) return true;
  }
  return false;
}

async function folderBytes(dir: string): Promise<number> {
  let n = 0;
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) n += statSync(join(e.parentPath, e.name)).size;
  }
  return n;
}

if (!existsSync(join(FIXTURE, "heldout.safetensors"))) {
  console.error(
    `quantization: ${FIXTURE}/heldout.safetensors is missing (made by tools/oracle/train_tiny.py)`,
  );
  process.exit(1);
}
const ref = await (async () => {
  await using f = await SafetensorsFile.open(join(FIXTURE, "heldout.safetensors"));
  const ids = Array.from((await f.read("ids")).data as BigInt64Array, Number);
  const t = await f.read("logits");
  const v = toFloat32(t.dtype, t.data);
  const V = t.shape[1];
  const logits = Array.from({ length: t.shape[0] }, (_, i) => v.subarray(i * V, (i + 1) * V));
  return { ids, logits };
})();
if (TOKENS > ref.logits.length) throw new Error(`--tokens ${TOKENS}: the fixture has ${ref.logits.length}`);

const tokenizer = await loadTokenizer(FIXTURE);
const verses = readFileSync(join(FIXTURE, "heldout.txt"), "utf8").trim().split("\n");
const prompts = Array.from({ length: PROMPTS }, (_, i) =>
  tokenizer.encode(verses[Math.floor((i * verses.length) / PROMPTS)]).slice(0, PROMPT_TOKENS),
);

const hfRef = ref.logits.slice(0, TOKENS).map(logSoftmax);
const hfNll = hfRef.reduce((s, lp, t) => s - lp[ref.ids[t + 1]], 0) / TOKENS;
const hfTop5 = ref.logits.slice(0, TOKENS).map((l) => topK(l, 5));

type Row = Awaited<ReturnType<typeof measure>>;

const config08b = parseQwen35Config(publishedConfigJson("0.8b"));
/**
 * Stored weight bytes the same options give Qwen3.5-0.8B (the converter's size estimate, tensor by
 * tensor: super-blocks, embedding, lm_head) — the size that matters, where this 256-wide fixture's
 * LUT tables are an outsized overhead.
 */
function projected08bBytes(options: Partial<ConvertOptions>): number {
  const quant = planQuant(config08b, { rules: specRules(resolveQuantSpec(options)) });
  const packages = planComponents(config08b, { fuse: "all", budgetBytes: Number.POSITIVE_INFINITY, quant });
  return packages.reduce((n, c) => n + c.estimatedBytes, 0);
}

/**
 * KL(HF ‖ converted) and top-1 on a fixture's golden: prompt then the golden greedy ids,
 * teacher-forced, each position against HF's logits for it. A fixture the converter refuses
 * (MoE) is reported with the reason.
 */
async function measureGolden(enc: (typeof ENCODINGS)[number], name: string, work: string) {
  const dir = join(FIXTURES, name);
  const g = await loadGolden(dir);
  const out = join(work, `${name}-${enc.name.replace(/[^a-z0-9]+/gi, "-")}`);
  try {
    await convert({ model: dir, out, ctx: 128, ...enc.options });
  } catch (e) {
    if ((e as { code?: string }).code === "E_UNSUPPORTED_MODEL")
      return { fixture: name, skipped: (e as Error).message.split(";")[0] };
    throw e;
  }
  const model = await ChainRunner.load(out, {
    backend: referenceBackend({ precision: enc.precision ?? "fp16", flushSubnormals: true }),
  });
  const ids = [...g.promptIds, ...g.generatedIds.slice(0, g.decodeLogits.length)];
  const hf = [...g.promptLogits, ...g.decodeLogits];
  let top1 = 0;
  let kl = 0;
  for (let t = 0; t < hf.length; t++) {
    const o = t === 0 ? await model.prefill([ids[0]]) : await model.decode(ids[t]);
    if (!("logits" in o)) throw new Error("expected logits");
    if (argmax(o.logits) === argmax(hf[t])) top1++;
    const lp = logSoftmax(hf[t]);
    const lq = logSoftmax(o.logits);
    for (let i = 0; i < lp.length; i++) kl += Math.exp(lp[i]) * (lp[i] - lq[i]);
  }
  model.dispose();
  rmSync(out, { recursive: true, force: true });
  return { fixture: name, positions: hf.length, top1: top1 / hf.length, klMean: kl / hf.length };
}

/** Converts the fixture with one encoding and measures it. */
async function measure(enc: (typeof ENCODINGS)[number], work: string) {
  const started = performance.now();
  const out = join(work, enc.name.replace(/[^a-z0-9]+/gi, "-"));
  const conv = await convert({ model: FIXTURE, out, ctx: 512, ...enc.options });
  const model = await ChainRunner.load(out, {
    backend: referenceBackend({ precision: enc.precision ?? "fp16", flushSubnormals: true }),
  });
  let top1 = 0;
  let top5 = 0;
  let kl = 0;
  let nll = 0;
  let nonFinite = 0;
  for (let t = 0; t < TOKENS; t++) {
    const o = t === 0 ? await model.prefill([ref.ids[0]]) : await model.decode(ref.ids[t]);
    if (!("logits" in o)) throw new Error("expected logits");
    if (o.logits.some((x) => !Number.isFinite(x))) nonFinite++;
    const lq = logSoftmax(o.logits);
    const lp = hfRef[t];
    if (argmax(o.logits) === argmax(ref.logits[t])) top1++;
    const mine = new Set(topK(o.logits, 5));
    top5 += hfTop5[t].filter((i) => mine.has(i)).length / 5;
    let k = 0;
    for (let i = 0; i < lp.length; i++) k += Math.exp(lp[i]) * (lp[i] - lq[i]);
    kl += k;
    nll -= lq[ref.ids[t + 1]];
  }
  let loops = 0;
  const samples: string[] = [];
  for (const p of prompts) {
    model.reset();
    let o = await model.prefill(p);
    const gen: number[] = [];
    for (let i = 0; i < GEN_TOKENS; i++) {
      if (!("logits" in o)) throw new Error("expected logits");
      gen.push(argmax(o.logits));
      o = await model.decode(gen[gen.length - 1]);
    }
    if (endsInLoop(gen)) loops++;
    samples.push(tokenizer.decode([...p, ...gen]));
  }
  model.dispose();
  const fixtures = [];
  for (const name of GOLDEN_FIXTURES) fixtures.push(await measureGolden(enc, name, work));
  const row = {
    name: enc.name,
    policy: conv.manifest.quantization.policy,
    body: conv.manifest.quantization.body,
    lmHead: conv.manifest.quantization.lmHead,
    precision: enc.precision ?? "fp16",
    top1: top1 / TOKENS,
    top5: top5 / TOKENS,
    klMean: kl / TOKENS,
    perplexity: Math.exp(nll / TOKENS),
    loops,
    loopRate: loops / prompts.length,
    nonFiniteSteps: nonFinite,
    packageBytes: await folderBytes(out),
    projected08bBytes: projected08bBytes(enc.options),
    seconds: (performance.now() - started) / 1000,
    samples,
    fixtures,
  };
  rmSync(out, { recursive: true, force: true });
  return row;
}

/** Runs one row in a child process (--jobs > 1); its last stdout line is the row as JSON. */
function inChild(index: number): Promise<Row> {
  return new Promise((resolve, reject) => {
    const args = [
      "--import",
      "tsx",
      fileURLToPath(import.meta.url),
      "--row",
      String(index),
      "--tokens",
      String(TOKENS),
    ];
    const child = spawn(process.execPath, args, {
      cwd: join(here, ".."),
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`${ENCODINGS[index].name}: exit ${code}`));
      resolve(JSON.parse(stdout.trim().split("\n").pop() as string) as Row);
    });
  });
}

const work = mkdtempSync(join(tmpdir(), "quant-bench-"));
if (argValue("--row") !== undefined) {
  try {
    console.log(JSON.stringify(await measure(ENCODINGS[Number(argValue("--row"))], work)));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  process.exit(0);
}

const only = argValue("--only")?.split(",");
const selected = ENCODINGS.map((e, i) => ({ e, i })).filter(({ e }) => !only || only.includes(e.name));
const jobs = Math.max(1, Number(argValue("--jobs") ?? 1));
const rows: Row[] = new Array(selected.length);
const print = (r: Row) =>
  console.log(
    `${r.name}: top-1 ${(100 * r.top1).toFixed(1)}% · top-5 ${(100 * r.top5).toFixed(1)}% · KL ${r.klMean.toFixed(4)} · ppl ${r.perplexity.toFixed(2)} · loops ${r.loops}/${PROMPTS} · ${(r.packageBytes / 1e6).toFixed(2)} MB · ${r.seconds.toFixed(0)} s`,
  );
try {
  let next = 0;
  const worker = async () => {
    while (next < selected.length) {
      const k = next++;
      rows[k] = jobs > 1 ? await inChild(selected[k].i) : await measure(selected[k].e, work);
      print(rows[k]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(jobs, selected.length) }, worker));
} finally {
  rmSync(work, { recursive: true, force: true });
}

const hfPerplexity = Math.exp(hfNll);
console.log(`\nHF fp32 perplexity of the same ${TOKENS} tokens: ${hfPerplexity.toFixed(2)}\n`);
console.log(
  "| encoding | body | lm_head | top-1 | top-5 | mean KL (nats) | perplexity | greedy loops | packages |",
);
console.log("|---|---|---|---|---|---|---|---|---|");
const klText = (kl: number) => (kl >= 1e-3 ? kl.toFixed(4) : kl.toExponential(1));
for (const r of rows) {
  console.log(
    `| ${r.name} | ${r.body} | ${r.lmHead} | ${(100 * r.top1).toFixed(1)}% | ${(100 * r.top5).toFixed(1)}% | ${klText(r.klMean)} | ${r.perplexity.toFixed(2)} | ${r.loops}/${PROMPTS} | ${(r.packageBytes / 1e6).toFixed(1)} MB |`,
  );
}
console.log(
  `\nKL(HF fp32 ‖ converted) / top-1 per fixture (tiny-trained: ${TOKENS} held-out positions; the others: prompt + golden greedy continuation)\n`,
);
console.log(`| encoding | policy | tiny-trained | ${GOLDEN_FIXTURES.join(" | ")} |`);
console.log(`|---|---|---|${GOLDEN_FIXTURES.map(() => "---|").join("")}`);
for (const r of rows) {
  const cells = r.fixtures.map((f) =>
    "skipped" in f
      ? "skipped (MoE)"
      : `${klText(f.klMean as number)} / ${(100 * (f.top1 as number)).toFixed(0)}%`,
  );
  console.log(
    `| ${r.name} | ${r.policy ?? ""} | ${klText(r.klMean)} / ${(100 * r.top1).toFixed(1)}% | ${cells.join(" | ")} |`,
  );
}

const results = join(here, "results");
mkdirSync(results, { recursive: true });
const file = join(results, only ? "quantization-partial.json" : "quantization.json");
writeFileSync(
  file,
  `${JSON.stringify(
    {
      bench: "quantization",
      date: new Date().toISOString(),
      machine: benchMachine(),
      fixture: "fixtures/tiny-trained",
      goldenFixtures: GOLDEN_FIXTURES.map((f) => `fixtures/${f}`),
      heldOut: { text: "Book of Ruth (not trained on)", tokens: TOKENS, hfPerplexity },
      freeGeneration: {
        prompts: PROMPTS,
        promptTokens: PROMPT_TOKENS,
        generatedTokens: GEN_TOKENS,
        loopSpan: LOOP_SPAN,
        loopPeriod: LOOP_PERIOD,
      },
      backend: "reference interpreter; fp16 rows round every fp16 result and flush subnormals (ANE-like)",
      rows,
    },
    null,
    2,
  )}\n`,
);
console.log(`\nwrote ${file}`);

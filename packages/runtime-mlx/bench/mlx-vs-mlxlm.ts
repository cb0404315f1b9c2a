/**
 * runtime-mlx against mlx-lm, in the same run, on the same machine, MLX build and checkpoints.
 *
 *   pnpm --filter @anemll-qwen35/runtime-mlx bench [-- --runs 3] [--only fixture,0.8b,moe] [--quick]
 *
 * Each scenario alternates processes: ours, theirs, ours, theirs… (one fresh process per run: load,
 * a short warm-up generation, reset MLX's peak-memory counter, then one timed generation), and
 * reports the medians and our/their ratios. Metrics are mlx-lm's (stream_generate, generate.py):
 * - prompt tok/s = prompt tokens / (time from the start until the first generated token is known,
 *   i.e. prefill plus the first token; with pipelining, the next step is already scheduled);
 * - generation tok/s = N / (time from the first token until the N-th), N = max_tokens (mlx-lm counts
 *   the first token although its time went into the prompt phase; so do we);
 * - peak memory = MLX's peak memory counter / 1e9 at the end (reset after load and warm-up on both
 *   sides; the peak including load is recorded too).
 * Greedy decoding with EOS disabled; ours drives the StepModel (prefill/decode + argmax in JS, as
 * packages/generate would); theirs runs mlx_lm.generate.stream_generate.
 *
 * The mlx-lm side runs with /work/main/.venv-oracle/bin/python (or $MLXLM_PYTHON). Results go to
 * bench/results/mlx-vs-mlxlm.json.
 */
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { defaultSyntheticDir, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { loadMlxModel, mx } from "../src/index.js";
import { ensureMoeBenchCheckpoint, MOE_BENCH_NAME, machineFacts, median, seededIds } from "./common.js";

const HERE = fileURLToPath(new URL(".", import.meta.url));
const REPO = resolve(HERE, "../../..");
const PYTHON = process.env.MLXLM_PYTHON ?? join(REPO, ".venv-oracle/bin/python");

interface Scenario {
  id: string;
  description: string;
  model: string;
  dtype: "float32" | "bfloat16";
  bits: 4 | 8 | null;
  promptTokens: number;
  maxTokens: number;
  /** Prompt ids are drawn from [0, idRange). */
  idRange: number;
}

interface RunResult {
  prompt_tps: number;
  generation_tps: number;
  peak_memory_gb: number;
  peak_memory_with_load_gb: number;
  generation_tokens: number;
  load_s: number;
  tokens: number[];
  mlx_version: string;
}

const argmax = (a: Float32Array): number => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
};

/** One timed generation with runtime-mlx (runs in its own process; prints one JSON line). */
async function oursWorker(s: {
  model: string;
  dtype: string;
  bits: number | null;
  prompt: number[];
  max_tokens: number;
  warmup_prompt: number[];
}) {
  mx.setDefaultDevice("cpu");
  const t = performance.now();
  const model = await loadMlxModel(s.model, {
    dtype: s.dtype as "float32",
    bits: (s.bits ?? undefined) as 4 | undefined,
  });
  const loadS = (performance.now() - t) / 1000;
  const logitsOf = (o: unknown) => (o as { logits: Float32Array }).logits;

  let tok = argmax(logitsOf(await model.prefill(s.warmup_prompt)));
  for (let i = 0; i < 2; i++) tok = argmax(logitsOf(await model.decode(tok)));
  model.reset();
  const peakWithLoad = mx.getPeakMemory() / 1e9;
  mx.resetPeakMemory();
  mx.clearCache();

  const tokens: number[] = [];
  let tic = performance.now();
  tok = argmax(logitsOf(await model.prefill(s.prompt)));
  tokens.push(tok);
  const promptTps = s.prompt.length / ((performance.now() - tic) / 1000);
  tic = performance.now();
  for (let n = 1; n < s.max_tokens; n++) {
    tok = argmax(logitsOf(await model.decode(tok)));
    tokens.push(tok);
  }
  const generationTps = s.max_tokens / ((performance.now() - tic) / 1000);
  const result: RunResult = {
    prompt_tps: promptTps,
    generation_tps: generationTps,
    peak_memory_gb: mx.getPeakMemory() / 1e9,
    peak_memory_with_load_gb: peakWithLoad,
    generation_tokens: s.max_tokens,
    load_s: loadS,
    tokens,
    mlx_version: mx.mlxVersion(),
  };
  model.dispose();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

function runProcess(cmd: string, args: string[]): Promise<RunResult> {
  return new Promise((resolvePromise, reject) => {
    execFile(
      cmd,
      args,
      { maxBuffer: 64 * 1024 * 1024, cwd: resolve(HERE, "..") },
      (error, stdout, stderr) => {
        if (error) {
          reject(new Error(`${cmd} ${args[0]} failed: ${stderr || error.message}`));
          return;
        }
        const line = stdout.trim().split("\n").at(-1) ?? "";
        try {
          resolvePromise(JSON.parse(line) as RunResult);
        } catch {
          reject(new Error(`${cmd}: no JSON result in its output:\n${stdout}\n${stderr}`));
        }
      },
    );
  });
}

async function ensureCheckpoints(only: Set<string>): Promise<void> {
  if (only.has("0.8b") && !existsSync(join(defaultSyntheticDir("0.8b"), "config.json"))) {
    console.log(
      "writing the synthetic 0.8B checkpoint into the cache (what `pnpm anemll-qwen35 synth --size 0.8b` writes)…",
    );
    await writeSyntheticCheckpoint({ size: "0.8b" });
  }
  if (only.has("moe")) await ensureMoeBenchCheckpoint();
}

async function main() {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((a) => a !== "--"),
    options: {
      runs: { type: "string" },
      only: { type: "string" },
      quick: { type: "boolean" },
      worker: { type: "string" },
    },
  });
  if (values.worker) {
    await oursWorker(JSON.parse(values.worker));
    return;
  }
  const runs = Number(values.runs ?? 3);
  const only = new Set((values.only ?? "fixture,0.8b,moe").split(","));
  const quick = values.quick ?? false;
  if (!existsSync(PYTHON)) throw new Error(`no Python with mlx-lm at ${PYTHON} (set MLXLM_PYTHON)`);
  await ensureCheckpoints(only);

  const scenarios: Scenario[] = [
    {
      id: "fixture",
      description: "fixtures/tiny-gqa (dense, 8 layers, hidden 128, vocab 1024), fp32",
      model: join(REPO, "fixtures/tiny-gqa"),
      dtype: "float32",
      bits: null,
      promptTokens: 128,
      maxTokens: quick ? 16 : 64,
      idRange: 993,
    },
    {
      id: "0.8b",
      description:
        "synthetic Qwen3.5-0.8B (real shapes, random bf16 weights), 4-bit at load (group 64), fp32 activations",
      model: defaultSyntheticDir("0.8b"),
      dtype: "float32",
      bits: 4,
      promptTokens: quick ? 8 : 128,
      maxTokens: quick ? 4 : 64,
      idRange: 248044,
    },
    {
      id: "moe",
      description:
        "synthetic MoE, 35B-A3B expert routing (256 experts, top-8) scaled down: 8 layers (DDDA x2), hidden 512, " +
        "attention 4q/1kv x 256, GDN 4k/8v heads x 128, expert and shared FFN 128, vocab 62080; 4-bit at load, fp32 activations",
      model: defaultSyntheticDir(MOE_BENCH_NAME),
      dtype: "float32",
      bits: 4,
      promptTokens: quick ? 16 : 128,
      maxTokens: quick ? 8 : 64,
      idRange: 62080,
    },
  ].filter((s) => only.has(s.id)) as Scenario[];

  const started = new Date().toISOString();
  const load0 = loadavg();
  const out: Record<string, unknown>[] = [];
  for (const s of scenarios) {
    const prompt = seededIds(s.promptTokens, s.idRange, 7);
    const job = {
      model: s.model,
      dtype: s.dtype,
      bits: s.bits,
      prompt,
      max_tokens: s.maxTokens,
      warmup_prompt: seededIds(8, s.idRange, 11),
    };
    const ours: RunResult[] = [];
    const theirs: RunResult[] = [];
    for (let r = 0; r < runs; r++) {
      ours.push(
        await runProcess(process.execPath, [
          "--import",
          "tsx",
          fileURLToPath(import.meta.url),
          "--worker",
          JSON.stringify(job),
        ]),
      );
      theirs.push(await runProcess(PYTHON, [join(HERE, "mlxlm_driver.py"), JSON.stringify(job)]));
      const o = ours.at(-1)!;
      const t = theirs.at(-1)!;
      console.log(
        `${s.id} run ${r + 1}/${runs}: ours gen ${o.generation_tps.toFixed(2)} tok/s, prompt ${o.prompt_tps.toFixed(2)}, peak ${o.peak_memory_gb.toFixed(3)} GB | ` +
          `mlx-lm gen ${t.generation_tps.toFixed(2)} tok/s, prompt ${t.prompt_tps.toFixed(2)}, peak ${t.peak_memory_gb.toFixed(3)} GB`,
      );
    }
    const med = (rs: RunResult[], k: keyof RunResult) => median(rs.map((r) => r[k] as number));
    const summary = (rs: RunResult[]) => ({
      prompt_tps: med(rs, "prompt_tps"),
      generation_tps: med(rs, "generation_tps"),
      peak_memory_gb: med(rs, "peak_memory_gb"),
      peak_memory_with_load_gb: med(rs, "peak_memory_with_load_gb"),
      load_s: med(rs, "load_s"),
    });
    const o = summary(ours);
    const t = summary(theirs);
    const entry = {
      id: s.id,
      description: s.description,
      settings: {
        dtype: s.dtype,
        bits: s.bits,
        group_size: s.bits ? 64 : null,
        prompt_tokens: s.promptTokens,
        max_tokens: s.maxTokens,
        runs,
      },
      ours: { median: o, runs: ours.map(({ tokens, ...r }) => r) },
      mlx_lm: { median: t, runs: theirs.map(({ tokens, ...r }) => r) },
      ratios: {
        generation_tps: o.generation_tps / t.generation_tps,
        prompt_tps: o.prompt_tps / t.prompt_tps,
        peak_memory: o.peak_memory_gb / t.peak_memory_gb,
      },
      same_tokens: ours.every((r, i) => JSON.stringify(r.tokens) === JSON.stringify(theirs[i].tokens)),
      tokens: { ours: ours[0].tokens, mlx_lm: theirs[0].tokens },
    };
    console.log(
      `${s.id}: generation ratio ${entry.ratios.generation_tps.toFixed(3)} (ours ${o.generation_tps.toFixed(2)} / mlx-lm ${t.generation_tps.toFixed(2)} tok/s), ` +
        `prompt ratio ${entry.ratios.prompt_tps.toFixed(3)}, peak memory ratio ${entry.ratios.peak_memory.toFixed(3)}, same tokens: ${entry.same_tokens}`,
    );
    out.push(entry);
  }
  const result = {
    benchmark: "runtime-mlx vs mlx-lm (same run, alternating processes)",
    started,
    finished: new Date().toISOString(),
    machine: machineFacts(
      load0,
      "shared 2-core machine with other jobs running; compare ratios from the same run, not absolute numbers",
    ),
    device: "cpu",
    metrics: "mlx-lm stream_generate definitions (see the header of bench/mlx-vs-mlxlm.ts)",
    scenarios: out,
  };
  const dir = join(HERE, "results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "mlx-vs-mlxlm.json");
  writeFileSync(`${file}.tmp`, `${JSON.stringify(result, null, 2)}\n`);
  const { renameSync } = await import("node:fs");
  renameSync(`${file}.tmp`, file);
  console.log(`wrote ${file}`);
}

await main();

/**
 * A model split across 1, 2 and 3 ranks on this machine (MLX's ring backend over TCP on 127.0.0.1,
 * CPU), in the same run:
 *
 *   pnpm --filter @anemll-qwen35/runtime-mlx bench:distributed [-- --runs 3] [--quick]
 *
 * 1. parity on the scaled MoE (256 experts, top-8; bench/configs.ts) in fp32: the parity test's
 *    scenario (chunked prefill with every row's logits, greedy decode, a non-argmax token, reset) on
 *    one process and on 2 and 3 ranks: same tokens, largest |logit difference|;
 * 2. speed: per rank count, `--runs` fresh launches in rotation (1, 2, 3, 1, 2, 3, ...): prefill tok/s
 *    (a 128-token prompt in 32-token chunks, so ranks overlap), decode tok/s (median step), the
 *    hand-off time of one step (an empty step around the ring: header and one hidden-state vector
 *    per hop, no compute; median of 20), and per rank MLX's active memory once loaded, its peak, and
 *    the process's peak RSS.
 *
 * The ranks share this machine's cores (2 here), so more ranks cannot be faster: what the figures
 * show is what splitting costs (hand-off, per-rank overhead) and how memory divides. Results go to
 * bench/results/distributed.json.
 */
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { mx } from "../src/index.js";
import type { RankJob, RankStats } from "../test/distributed/rank.js";
import { runAlone, startRanks } from "../test/distributed/ranks.js";
import { maxRowDiff, type RankModel, type ScenarioResult } from "../test/distributed/scenario.js";
import { ensureMoeBenchCheckpoint, machineFacts, median, seededIds } from "./common.js";

const HERE = fileURLToPath(new URL(".", import.meta.url));

/** Runs `job` on `size` ranks (1: one plain process); returns every rank's output lines. */
async function run(size: number, job: RankJob): Promise<string[]> {
  if (size === 1) {
    const r = await runAlone(job);
    if (r.code !== 0) throw new Error(`the single process failed:\n${r.lines.join("\n")}`);
    return r.lines;
  }
  const ranks = await startRanks(size, job);
  const exits = await Promise.all(ranks.job.ranks.map((r) => r.exited));
  if (exits.some((e) => e.code !== 0)) throw new Error(`${size} ranks failed:\n${ranks.lines.join("\n")}`);
  return ranks.lines;
}

const statsOf = (lines: string[]): RankStats[] =>
  lines
    .filter((l) => / STATS \{/.test(l))
    .map((l) => JSON.parse(l.slice(l.indexOf("STATS ") + 6)) as RankStats)
    .sort((a, b) => a.rank - b.rank);

async function main() {
  const { values } = parseArgs({
    args: process.argv.slice(2).filter((a) => a !== "--"),
    options: { runs: { type: "string", default: "3" }, quick: { type: "boolean", default: false } },
  });
  const runs = values.quick ? 1 : Number(values.runs);
  const started = new Date().toISOString();
  const load0 = loadavg();
  const dir = await ensureMoeBenchCheckpoint();
  const vocab = 62080;
  const model: RankModel = { name: "moe-256x8", path: dir, prefillChunk: 32 };
  const tmp = mkdtempSync(join(tmpdir(), "anemll-dist-bench-"));

  // 1. parity
  const prompt = seededIds(12, vocab, 7);
  const parity: Record<string, unknown>[] = [];
  let reference: ScenarioResult | undefined;
  for (const size of [1, 2, 3]) {
    const out = join(tmp, `parity-${size}.json`);
    const scenario: RankModel = { ...model, prefillChunk: 5 };
    await run(size, { mode: "scenario", out, models: [scenario], prompt });
    const got = JSON.parse(readFileSync(out, "utf8"))[scenario.name] as ScenarioResult & {
      layers: unknown[];
    };
    reference ??= got;
    const row = {
      ranks: size,
      layers: got.layers,
      same_tokens: JSON.stringify(got.tokens) === JSON.stringify(reference.tokens),
      max_abs_logit_diff: maxRowDiff(got.rows, reference.rows),
      logit_rows: got.rows.length,
    };
    parity.push(row);
    console.log(`parity ${size} rank(s): ${JSON.stringify(row)}`);
  }

  // 2. speed and memory
  const benchJob: RankJob = {
    mode: "bench",
    model,
    prompt: seededIds(128, vocab, 11),
    decodeTokens: values.quick ? 8 : 32,
    pings: 20,
  };
  const perSize = new Map<number, RankStats[][]>([
    [1, []],
    [2, []],
    [3, []],
  ]);
  for (let r = 0; r < runs; r++) {
    for (const size of [1, 2, 3]) {
      const stats = statsOf(await run(size, benchJob));
      if (stats.length !== size)
        throw new Error(`${size} rank(s): expected ${size} STATS lines, got ${stats.length}`);
      perSize.get(size)!.push(stats);
      const s0 = stats[0];
      console.log(
        `run ${r + 1}/${runs} · ${size} rank(s): decode ${(1000 / median(s0.decodeStepMs!)).toFixed(1)} tok/s, ` +
          `prefill ${((benchJob.prompt.length * 1000) / s0.prefillMs!).toFixed(1)} tok/s` +
          (s0.pingMs!.length ? `, hand-off ${median(s0.pingMs!).toFixed(2)} ms` : ""),
      );
    }
  }
  const speed = [...perSize.entries()].map(([size, all]) => {
    const zero = all.map((s) => s[0]);
    return {
      ranks: size,
      runs: all.length,
      layers: all[0].map((s) => s.layers),
      prefill_tokens_per_s: median(zero.map((s) => (benchJob.prompt.length * 1000) / s.prefillMs!)),
      decode_tokens_per_s: median(zero.map((s) => 1000 / median(s.decodeStepMs!))),
      decode_step_ms: median(zero.map((s) => median(s.decodeStepMs!))),
      handoff_ms: size === 1 ? 0 : median(zero.map((s) => median(s.pingMs!))),
      load_s: median(zero.map((s) => s.loadMs! / 1000)),
      memory_per_rank: all[0].map((_, rank) => ({
        rank,
        loaded_gb: median(all.map((s) => s[rank].loadedBytes)) / 1e9,
        mlx_peak_gb: median(all.map((s) => s[rank].peakBytes)) / 1e9,
        max_rss_gb: median(all.map((s) => s[rank].maxRssBytes)) / 1e9,
      })),
    };
  });
  const one = speed[0];
  const result = {
    benchmark: "runtime-mlx pipeline parallel: 1, 2 and 3 ranks on one machine (ring backend, 127.0.0.1)",
    started,
    finished: new Date().toISOString(),
    command: "pnpm --filter @anemll-qwen35/runtime-mlx bench:distributed",
    machine: {
      ...machineFacts(
        load0,
        "every rank shares this machine's cores: splitting shows its cost, not a speed-up; quote ratios from one run",
      ),
      mlx: mx.mlxVersion(),
    },
    model: {
      name: model.name,
      path: dir,
      dtype: "float32",
      device: "cpu",
      config: "bench/configs.ts moeBenchConfig",
    },
    parity,
    speed: speed.map((s) => ({
      ...s,
      decode_vs_1_rank: s.decode_tokens_per_s / one.decode_tokens_per_s,
      prefill_vs_1_rank: s.prefill_tokens_per_s / one.prefill_tokens_per_s,
    })),
  };
  rmSync(tmp, { recursive: true, force: true });
  const outDir = join(HERE, "results");
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, values.quick ? "distributed-quick.json" : "distributed.json");
  writeFileSync(`${file}.tmp`, `${JSON.stringify(result, null, 2)}\n`);
  renameSync(`${file}.tmp`, file);
  console.log(JSON.stringify(result.speed, null, 2));
  console.log(`wrote ${file}`);
}

await main();

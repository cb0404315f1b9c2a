/**
 * Safetensors read throughput: our lazy reader vs Python safetensors (and MLX's loader) on every
 * tensor of the synthetic 0.8B checkpoint (created first if missing), in the same run.
 *
 *   pnpm --filter @anemll-qwen35/ir bench            (all benchmarks)
 *   npx tsx bench/safetensors-read.ts [--dir DIR] [--runs 3]
 *
 * The page cache cannot be dropped here, so each method reads everything once to warm it, then
 * the median of `runs` timed passes is reported: this measures parsing + copying out of the page
 * cache, not the disk. Writes bench/results/safetensors-read.json.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { SafetensorsCheckpoint, writeFileAtomic, writeSyntheticCheckpoint } from "../src/checkpoint/index.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = resolve(HERE, "../../..");
const PYTHON = join(REPO_ROOT, ".venv", "bin", "python");

interface Measured {
  bytes: number;
  seconds: number[];
  median_s: number;
  gbps: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function measure(runs: number, pass: () => Promise<number>): Promise<Measured> {
  await pass(); // warm the page cache
  const seconds: number[] = [];
  let bytes = 0;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    bytes = await pass();
    seconds.push((performance.now() - t0) / 1000);
  }
  const m = median(seconds);
  return { bytes, seconds, median_s: m, gbps: bytes / 1e9 / m };
}

/** Reads every tensor (as an ir Tensor) with at most `concurrency` reads in flight. */
async function readAll(dir: string, concurrency: number): Promise<number> {
  const ckpt = await SafetensorsCheckpoint.open(dir);
  try {
    const names = ckpt.names();
    let next = 0;
    let bytes = 0;
    const worker = async () => {
      while (next < names.length) {
        const t = await ckpt.read(names[next++]);
        bytes += t.data.byteLength;
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return bytes;
  } finally {
    await ckpt.close();
  }
}

/** Reads every tensor's bytes into one reused buffer (how a tensor-at-a-time converter can read). */
async function readAllInto(dir: string): Promise<number> {
  const ckpt = await SafetensorsCheckpoint.open(dir);
  try {
    const names = ckpt.names();
    const largest = Math.max(...names.map((n) => ckpt.info(n).byteLength));
    const buffer = new Uint8Array(largest);
    let bytes = 0;
    for (const name of names) bytes += (await ckpt.readInto(name, buffer)).byteLength;
    return bytes;
  } finally {
    await ckpt.close();
  }
}

export async function safetensorsReadBench(argv: string[] = []): Promise<Record<string, unknown>> {
  const { values } = parseArgs({
    args: argv.filter((a) => a !== "--"),
    options: { dir: { type: "string" }, runs: { type: "string" } },
  });
  const loadAtStart = loadavg()[0];
  const runs = Number(values.runs ?? 3);
  let dir = values.dir;
  if (!dir) {
    const made = await writeSyntheticCheckpoint({ size: "0.8b" });
    dir = made.dir;
    console.log(
      made.skipped
        ? `using synthetic 0.8B at ${dir}`
        : `wrote synthetic 0.8B to ${dir} in ${made.seconds.toFixed(1)} s`,
    );
  }

  const ours = await measure(runs, () => readAll(dir, 1));
  console.log(
    `ours (sequential):      ${ours.gbps.toFixed(2)} GB/s (median ${ours.median_s.toFixed(3)} s, ${(ours.bytes / 1e9).toFixed(2)} GB)`,
  );
  const ours4 = await measure(runs, () => readAll(dir, 4));
  console.log(
    `ours (4 reads in flight): ${ours4.gbps.toFixed(2)} GB/s (median ${ours4.median_s.toFixed(3)} s)`,
  );

  const oursInto = await measure(runs, () => readAllInto(dir));
  console.log(
    `ours (readInto, one reused buffer): ${oursInto.gbps.toFixed(2)} GB/s (median ${oursInto.median_s.toFixed(3)} s)`,
  );

  let python: Record<string, unknown> | { error: string };
  const methods: Record<string, Measured> = {};
  if (!existsSync(PYTHON)) {
    python = { error: `no Python venv at ${PYTHON}` };
  } else {
    const r = spawnSync(PYTHON, [join(HERE, "safetensors_read.py"), "--dir", dir, "--runs", String(runs)], {
      encoding: "utf8",
      maxBuffer: 1 << 20,
    });
    if (r.status !== 0) {
      python = { error: `python exited ${r.status}: ${r.stderr.trim().split("\n").slice(-3).join(" | ")}` };
    } else {
      python = JSON.parse(r.stdout) as Record<string, unknown>;
      for (const [name, m] of Object.entries(python.methods as Record<string, Omit<Measured, "gbps">>)) {
        methods[name] = { ...m, gbps: m.bytes / 1e9 / m.median_s };
        console.log(
          `python ${name}: ${methods[name].gbps.toFixed(2)} GB/s (median ${m.median_s.toFixed(3)} s)`,
        );
      }
    }
  }
  const reference = methods["safetensors.deserialize"];
  const ratio = reference ? ours.gbps / reference.gbps : null;
  if (ratio !== null) console.log(`ratio ours / python safetensors.deserialize: ${ratio.toFixed(2)}`);
  const mlx = methods["mlx.core.load"];
  const ratioMlx = mlx ? ours.gbps / mlx.gbps : null;
  if (ratioMlx !== null) console.log(`ratio ours / mlx.core.load: ${ratioMlx.toFixed(2)}`);
  if ("error" in python) console.log(`python comparison skipped: ${python.error}`);

  const result = {
    benchmark: "safetensors-read",
    date: new Date().toISOString(),
    machine: {
      platform: process.platform,
      arch: process.arch,
      cpus: cpus().length,
      node: process.version,
      loadavg1m_at_start: loadAtStart,
    },
    checkpoint: { dir, note: "synthetic Qwen3.5-0.8B (VL layout, BF16 + F32), page cache warm" },
    runs,
    ours: { sequential: ours, concurrent4: ours4, readIntoReusedBuffer: oursInto },
    python: { ...python, methods },
    ratio_ours_vs_python_deserialize: ratio,
    ratio_ours_vs_mlx_load: ratioMlx,
    note: "numpy has no bfloat16, so safetensors.numpy.load_file / safe_open(framework='np') cannot read these BF16 files; safetensors.deserialize (Rust core) and mlx.core.load are compared instead",
  };
  await writeFileAtomic(
    join(HERE, "results", "safetensors-read.json"),
    `${JSON.stringify(result, null, 2)}\n`,
  );
  console.log(`wrote ${join(HERE, "results", "safetensors-read.json")}`);
  return result;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  safetensorsReadBench(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}

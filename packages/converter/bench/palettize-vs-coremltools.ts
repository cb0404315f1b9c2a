/**
 * Palettization speed and quality against coremltools' own k-means (palettize_weights'
 * per_grouped_channel path) on the same fp16 weights of the synthetic 0.8B checkpoint, in the same
 * run: LUT4, group 8. Prints a table and writes bench/results/palettize-vs-coremltools.json.
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/palettize-vs-coremltools.ts [--tensors N]
 * Needs tools/oracle/requirements-bench.txt (scikit-learn) in the project .venv.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { f16BitsToF32, f32ToF16Bits } from "@anemll-qwen35/core";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { findCoremltoolsPython, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";
import { depalettize, palettize, reconstructionError } from "../src/quant/palettize.js";

const here = dirname(fileURLToPath(import.meta.url));
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const BITS = Number(arg("--bits", "4"));
const GROUP = Number(arg("--group", "8"));
const WORKERS = Number(arg("--workers", String(Math.min(2, cpus().length))));
const CANDIDATES = [
  "layers.0.linear_attn.in_proj_qkv.weight",
  "layers.0.mlp.gate_proj.weight",
  "layers.0.mlp.down_proj.weight",
  "layers.3.self_attn.q_proj.weight",
  "layers.0.linear_attn.in_proj_z.weight",
  "layers.0.linear_attn.out_proj.weight",
];
const N = Number(arg("--tensors", String(CANDIDATES.length)));

const synth = await writeSyntheticCheckpoint({ size: "0.8b" });
await using ck = await Qwen35Checkpoint.open(synth.dir);
const dir = mkdtempSync(join(tmpdir(), "palettize-bench-"));
const tensors: { name: string; file: string; shape: number[] }[] = [];
const rows: {
  name: string;
  shape: number[];
  ours: { seconds: number; mse: number };
  coremltools?: { seconds: number; mse: number };
}[] = [];
for (const [i, name] of CANDIDATES.slice(0, N).entries()) {
  const t = await ck.getFloat32(name);
  // both sides start from the same fp16 values (Core ML stores fp16 weights)
  const bits = Uint16Array.from(t.data, f32ToF16Bits);
  const w = Float32Array.from(bits, f16BitsToF32);
  const file = `t${i}.f16`;
  writeFileSync(join(dir, file), bits);
  tensors.push({ name, file, shape: [...t.shape] });
  const start = performance.now();
  const p = await palettize(w, t.shape, { bits: BITS as 4, groupSize: GROUP, workers: WORKERS });
  const seconds = (performance.now() - start) / 1000;
  rows.push({
    name,
    shape: [...t.shape],
    ours: { seconds, mse: reconstructionError(w, depalettize(p)).mse },
  });
}
writeFileSync(join(dir, "tensors.json"), JSON.stringify(tensors));

const found = findCoremltoolsPython();
if ("reason" in found) throw new Error(`coremltools is needed for this benchmark: ${found.reason}`);
let note = "";
try {
  const out = execFileSync(
    found.python,
    [join(here, "palettize_coremltools.py"), dir, String(BITS), String(GROUP), String(WORKERS)],
    {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      maxBuffer: 1 << 24,
    },
  );
  for (const line of out.trim().split("\n")) {
    const r = JSON.parse(line) as { name: string; seconds: number; mse: number };
    const row = rows.find((x) => x.name === r.name);
    if (row) row.coremltools = { seconds: r.seconds, mse: r.mse };
  }
} catch (err) {
  note = `coremltools side failed: ${(err as Error).message.split("\n").slice(0, 3).join(" ")}`;
}

const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((s, r) => s + f(r), 0);
const ours = sum((r) => r.ours.seconds);
const theirs = rows.every((r) => r.coremltools) ? sum((r) => r.coremltools!.seconds) : Number.NaN;
console.log(`LUT${BITS}, group ${GROUP}, ${WORKERS} workers, synthetic 0.8B weights`);
console.log(
  "tensor                                     shape        ours s   ctools s   ours MSE     ctools MSE",
);
for (const r of rows) {
  console.log(
    `${r.name.padEnd(42)} ${r.shape.join("x").padEnd(11)} ${r.ours.seconds.toFixed(2).padStart(7)} ${(r.coremltools?.seconds ?? Number.NaN).toFixed(2).padStart(9)}   ${r.ours.mse.toExponential(3)}  ${(r.coremltools?.mse ?? Number.NaN).toExponential(3)}`,
  );
}
console.log(
  `total: ours ${ours.toFixed(2)} s, coremltools ${theirs.toFixed(2)} s → ${(theirs / ours).toFixed(1)}× faster`,
);
if (note) console.log(note);
const result = {
  bench: "palettize-vs-coremltools",
  date: new Date().toISOString(),
  machine: { cpus: cpus().length, cpuModel: cpus()[0]?.model, node: process.version, loadAverage: loadavg() },
  options: { bits: BITS, groupSize: GROUP, workers: WORKERS },
  tensors: rows,
  totals: { oursSeconds: ours, coremltoolsSeconds: theirs, speedup: theirs / ours },
  mseRatio: sum((r) => r.ours.mse) / sum((r) => r.coremltools?.mse ?? Number.NaN),
  note,
};
mkdirSync(join(here, "results"), { recursive: true });
writeFileSync(join(here, "results", "palettize-vs-coremltools.json"), `${JSON.stringify(result, null, 2)}\n`);

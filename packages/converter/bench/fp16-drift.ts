/**
 * fp16 drift of the prefill function's Gated DeltaNet math: max |Δlogit| against the Hugging Face
 * fp32 goldens (fixtures/tiny-trained/heldout.safetensors, teacher-forced logits) over its 512
 * held-out positions, on the reference interpreter's fp16 mode (rounding every op result, flushing
 * subnormals, constants included: the ANE's stand-in). Weights stay plain fp16 (no quant) so the
 * figure is the arithmetic's, not the quantization's. Rows:
 *   prefill C 16 / C 64   T = 64 chunks, WY sub-chunks of C tokens (gdn-chunked.ts, --wy-chunk)
 *   decode                the same 512 tokens one at a time through the decode function (the peer)
 *   prefill fp32 C 64     the same program in fp32 (the floor: the conversion's own error)
 *
 *   pnpm --filter @anemll-qwen35/converter exec tsx bench/fp16-drift.ts [--label after]
 *
 * Adds { label, commit, rows } to bench/results/fp16-drift.json (one entry per label, replaced when
 * run again), so a before/after pair is two runs of this script on two commits.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { toFloat32 } from "@anemll-qwen35/core";
import { maxAbsDiff, Qwen35Checkpoint, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import { buildComponent, type ComponentSpec } from "../src/graph/index.js";
import { type ChainPart, ReferenceChain } from "../test/chain.js";

const here = dirname(fileURLToPath(import.meta.url));
const fixture = join(here, "../../../fixtures/tiny-trained");
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const label = arg("--label", "current");
const POSITIONS = 512;
const T = 64;
const CTX = POSITIONS;

await using ck = await Qwen35Checkpoint.open(fixture);
const ref = await (async () => {
  await using f = await SafetensorsFile.open(join(fixture, "heldout.safetensors"));
  const ids = Array.from((await f.read("ids")).data as BigInt64Array, Number);
  const t = await f.read("logits");
  const v = toFloat32(t.dtype, t.data);
  const V = t.shape[1];
  return { ids, logits: Array.from({ length: t.shape[0] }, (_, i) => v.subarray(i * V, (i + 1) * V)) };
})();

async function chain(precision: "fp16" | "fp32", wyChunk: number): Promise<ReferenceChain> {
  const o = { ctx: CTX, prefillBatch: T, wyChunk, dtype: "fp16" as const }; // no quant: plain fp16 weights
  const part = async (spec: ComponentSpec): Promise<ChainPart> => {
    const b = await buildComponent(ck, spec, o);
    return { model: b.model, io: b.io, function: b.function, prefill: b.prefill };
  };
  return new ReferenceChain(
    {
      embed: await part({ kind: "embed" }),
      superblocks: [await part({ kind: "superblocks", first: 0, count: ck.config.superBlocks.length })],
      lmHead: await part({ kind: "lm_head" }),
    },
    { precision, flushSubnormals: precision === "fp16" },
  );
}

interface Row {
  readonly name: string;
  readonly maxAbsLogit: number;
  /** Mean over positions of the per-position max |Δlogit|. */
  readonly meanMaxAbsLogit: number;
  /** Positions whose max |Δlogit| is the worst, first. */
  readonly worstPosition: number;
  readonly nonFinite: number;
  readonly seconds: number;
}

function row(name: string, logits: Float32Array[], nonFinite: number, started: number): Row {
  const d = logits.map((l, i) => maxAbsDiff(l, ref.logits[i]));
  const max = Math.max(...d);
  const r = {
    name,
    maxAbsLogit: max,
    meanMaxAbsLogit: d.reduce((s, x) => s + x, 0) / d.length,
    worstPosition: d.indexOf(max),
    nonFinite,
    seconds: (performance.now() - started) / 1000,
  };
  console.log(
    `${name.padEnd(22)} max |Δlogit| ${max.toFixed(4)} (position ${r.worstPosition}), mean ${r.meanMaxAbsLogit.toFixed(4)}, non-finite ${nonFinite}, ${r.seconds.toFixed(0)} s`,
  );
  return r;
}

async function prefillRow(name: string, precision: "fp16" | "fp32", wyChunk: number): Promise<Row> {
  const started = performance.now();
  const c = await chain(precision, wyChunk);
  const logits: Float32Array[] = [];
  let nonFinite = 0;
  for (let p = 0; p < POSITIONS; p += T) {
    const r = await c.prefill(ref.ids.slice(p, p + T), p);
    logits.push(...r.logits);
    nonFinite += r.nonFinite.length;
  }
  return row(name, logits, nonFinite, started);
}

async function decodeRow(): Promise<Row> {
  const started = performance.now();
  const c = await chain("fp16", 16);
  c.reset();
  const logits: Float32Array[] = [];
  let nonFinite = 0;
  for (let p = 0; p < POSITIONS; p++) {
    const s = await c.step(ref.ids[p], p);
    logits.push(s.logits as Float32Array);
    nonFinite += s.nonFinite.length;
  }
  return row("decode fp16", logits, nonFinite, started);
}

const only = arg("--rows", "c16,c64,decode,fp32").split(",");
const rows: Row[] = [];
if (only.includes("c16")) rows.push(await prefillRow("prefill fp16 C 16", "fp16", 16));
if (only.includes("c64")) rows.push(await prefillRow("prefill fp16 C 64", "fp16", 64));
if (only.includes("decode")) rows.push(await decodeRow());
if (only.includes("fp32")) rows.push(await prefillRow("prefill fp32 C 64", "fp32", 64));

const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: here, encoding: "utf8" }).trim();
const dirty =
  execFileSync("git", ["status", "--porcelain", "--", "../src"], { cwd: here, encoding: "utf8" }).trim() !==
  "";
const file = join(here, "results", "fp16-drift.json");
const runs = existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")).runs as { label: string }[]) : [];
const entry = {
  label,
  commit: dirty ? `${commit}+changes` : commit,
  fixture: "tiny-trained",
  positions: POSITIONS,
  T,
  rows,
};
const out = {
  question: "fp16 drift of the prefill GDN math vs HF fp32 over 512 held-out positions",
  runs: [...runs.filter((r) => r.label !== label), entry],
};
writeFileSync(`${file}.tmp`, `${JSON.stringify(out, null, 2)}\n`);
renameSync(`${file}.tmp`, file);
console.log(`wrote ${file}`);

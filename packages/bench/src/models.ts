/**
 * The models the scenarios run: the repository's tiny fixtures (smoke scale), the synthetic
 * full-size checkpoints of ir (random weights with a published config; full scale), or a user's
 * checkpoint. ANE chains are converted once per option set into a cache folder and reused while
 * their model.json still matches the checkpoint and the options.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { CONVERTER_VERSION, convert, parseWeightQuant } from "@anemll-qwen35/converter";
import { type ChainManifest, readChainManifest } from "@anemll-qwen35/ir/chain";
import {
  defaultSyntheticDir,
  readQwen35Config,
  resolveModelRef,
  type SyntheticSize,
  scaledConfigJson,
  writeSyntheticCheckpoint,
} from "@anemll-qwen35/ir/checkpoint";
import { BenchModelError } from "./errors.js";
import type { Conversion, ModelInfo } from "./schema.js";

export interface ModelSpec {
  /** Short name for charts and cache folders. */
  readonly name: string;
  /** What the weights are ("fixture: random weights", …). */
  readonly weights: string;
  /** The checkpoint folder (written or resolved on first use; `log` hears of long work). */
  checkpoint(log?: (line: string) => void): Promise<string>;
}

/** Progress lines for long work: one when `what` changes, else at most one per 10 s. */
export function progressLines(
  log: (line: string) => void,
  prefix: string,
): (what: string, fraction: number) => void {
  let last: string | undefined;
  let lastAt = 0;
  return (what, fraction) => {
    if (what === last && performance.now() - lastAt < 10_000) return;
    last = what;
    lastAt = performance.now();
    log(`${prefix}: ${Math.round(fraction * 100)}%${what ? ` ${what}` : ""}`);
  };
}

export function cacheRoot(): string {
  return process.env.ANEMLL_QWEN35_CACHE || join(homedir(), ".cache", "anemll-qwen35");
}

/** fixtures/<name> of the repository (or $ANEMLL_QWEN35_FIXTURES/<name>). */
export function fixtureDir(name: string): string {
  const candidates: string[] = [];
  if (process.env.ANEMLL_QWEN35_FIXTURES) candidates.push(join(process.env.ANEMLL_QWEN35_FIXTURES, name));
  // src/ and dist/ sit in packages/bench; walk up to the repository's fixtures/
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    candidates.push(join(dir, "fixtures", name));
    dir = dirname(dir);
  }
  const hit = candidates.find((d) => existsSync(join(d, "config.json")));
  if (!hit) {
    throw new BenchModelError(
      name,
      `fixture not found (looked in ${candidates.join(", ")}); set ANEMLL_QWEN35_FIXTURES or pass --model`,
    );
  }
  return hit;
}

export function fixtureModel(name: "tiny-tied" | "tiny-gqa" | "tiny-moe" | "tiny-trained"): ModelSpec {
  return { name, weights: "fixture (seeded random weights)", checkpoint: async () => fixtureDir(name) };
}

export function syntheticModel(size: SyntheticSize): ModelSpec {
  return {
    name: `synthetic-${size}`,
    weights: "synthetic (random weights, published config)",
    checkpoint: async (log = () => {}) => {
      const progress = progressLines(log, `writing the synthetic ${size} checkpoint (once)`);
      const r = await writeSyntheticCheckpoint({ size, onProgress: (e) => progress("", e.fraction) });
      if (!r.skipped) log(`wrote the synthetic ${size} checkpoint (${r.dir}) in ${r.seconds.toFixed(1)} s`);
      return r.dir;
    },
  };
}

/**
 * A published size scaled down (fewer layers, fewer experts; every other dimension as published)
 * so that it fits this disk: e.g. 35B-A3B at 8 layers and 32 experts (≈ 4 GB in bf16).
 */
export function scaledSyntheticModel(
  size: SyntheticSize,
  o: { layers: number; experts?: number },
): ModelSpec {
  const name = `synthetic-${size}-l${o.layers}${o.experts ? `-e${o.experts}` : ""}`;
  return {
    name,
    weights: `synthetic (random weights, ${size} config scaled to ${o.layers} layers${o.experts ? `, ${o.experts} experts` : ""})`,
    checkpoint: async () =>
      (
        await writeSyntheticCheckpoint({
          config: scaledConfigJson(size, o),
          out: defaultSyntheticDir(name),
          vision: false,
          mtp: false,
        })
      ).dir,
  };
}

/** A checkpoint folder or hf: reference given by the user. */
export function userModel(ref: string): ModelSpec {
  const tail = basename(ref.replace(/^hf:/, "").replace(/@.*$/, "")) || "model";
  const tag = createHash("sha256").update(ref).digest("hex").slice(0, 8);
  return {
    name: `${tail.replace(/[^A-Za-z0-9._-]/g, "_")}-${tag}`,
    weights: "user checkpoint",
    checkpoint: () => resolveModelRef(ref.startsWith("hf:") ? ref : resolve(ref)),
  };
}

export async function modelInfo(spec: ModelSpec): Promise<ModelInfo> {
  const dir = await spec.checkpoint();
  const config = await readQwen35Config(join(dir, "config.json"));
  return {
    name: spec.name,
    source: dir,
    hiddenSize: config.hiddenSize,
    layers: config.numHiddenLayers,
    vocabSize: config.vocabSize,
    weights: spec.weights,
  };
}

export interface ChainOptions {
  readonly ctx: number;
  readonly fuse: number | "all";
  /** Super-block weights ("lut4", "lut6", "none", "int8" …; parseWeightQuant syntax). */
  readonly body: string;
  /** lm_head weights. */
  readonly lmHead: string;
}

export interface PreparedChain {
  readonly dir: string;
  readonly manifest: ChainManifest;
  /** Seconds the conversion took, when it ran now (undefined when the cache was reused). */
  readonly convertSeconds?: number;
}

function chainFolder(spec: ModelSpec, o: ChainOptions): string {
  const q = (s: string) => s.replace(/[^A-Za-z0-9]/g, "");
  return join(
    cacheRoot(),
    "bench",
    "chains",
    `${spec.name}-ctx${o.ctx}-fuse${o.fuse}-${q(o.body)}-${q(o.lmHead)}`,
  );
}

async function sha256File(path: string): Promise<string> {
  return createHash("sha256")
    .update(await readFile(path))
    .digest("hex");
}

async function reusable(
  dir: string,
  checkpoint: string,
  o: ChainOptions,
): Promise<ChainManifest | undefined> {
  if (!existsSync(join(dir, "model.json"))) return undefined;
  try {
    const m = await readChainManifest(dir);
    const same =
      m.converter.version === CONVERTER_VERSION &&
      m.ctx === o.ctx &&
      m.fuse === o.fuse &&
      m.dtype === "fp16" &&
      m.quantization.body === o.body &&
      m.quantization.lmHead === o.lmHead &&
      m.source.configSha256 === (await sha256File(join(checkpoint, "config.json")));
    return same ? m : undefined;
  } catch {
    return undefined;
  }
}

/** Converts `spec` with `o` into the bench cache (or reuses an earlier identical conversion). */
export async function ensureChain(
  spec: ModelSpec,
  o: ChainOptions,
  log: (line: string) => void = () => {},
): Promise<PreparedChain> {
  const checkpoint = await spec.checkpoint(log);
  const dir = chainFolder(spec, o);
  const cached = await reusable(dir, checkpoint, o);
  if (cached) return { dir, manifest: cached };
  log(`converting ${spec.name} (ctx ${o.ctx}, fuse ${o.fuse}, body ${o.body}, lm_head ${o.lmHead}) → ${dir}`);
  // a line per package, and one every 10 s within a long one
  const progress = progressLines(log, `converting ${spec.name}`);
  const r = await convert({
    model: checkpoint,
    out: dir,
    ctx: o.ctx,
    fuse: o.fuse,
    body: parseWeightQuant(o.body, "body"),
    lmHead: parseWeightQuant(o.lmHead, "lm-head"),
    resume: true,
    onProgress: (e) => progress(e.component ?? e.stage, e.fraction),
  });
  log(`converted ${spec.name} in ${r.seconds.toFixed(1)} s`);
  return { dir, manifest: r.manifest, convertSeconds: r.seconds };
}

/** The conversion facts a result records for an ANE run. */
export function conversionOf(m: ChainManifest, precision?: string): Conversion {
  return {
    ctx: m.ctx,
    fuse: m.fuse,
    body: m.quantization.body,
    lmHead: m.quantization.lmHead,
    embed: m.quantization.embed,
    dtype: m.dtype,
    components: m.components.map((c) => c.name),
    precision,
  };
}

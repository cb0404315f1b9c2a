/**
 * verifyAgainstMlx(): a converted chain checked against the checkpoint it was converted from, run by
 * runtime-mlx in float32 — no goldens and no Python needed, so a real conversion can be checked on
 * the machine that made it. Both run the same prompts; the chain is teacher-forced with MLX's
 * greedy tokens, and every step compares the logits (top-1, cosine, max |Δlogit|) and every
 * super-block's output with MLX's hidden state after the same layers, so a conversion that went
 * wrong is named by the first super-block that drifts.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Tensor, toFloat32 } from "@anemll-qwen35/core";
import { loadTokenizer } from "@anemll-qwen35/generate";
import { type ChainManifest, type ComponentIO, readChainManifest } from "@anemll-qwen35/ir/chain";
import { argmax, cosine, maxAbsDiff, resolveModelRef } from "@anemll-qwen35/ir/checkpoint";
import type { Backend, LoadedComponent } from "@anemll-qwen35/runtime-ane";
import { ModelLoadError } from "./errors.js";
import { type BackendInfo, loadModel } from "./load.js";
import type { LoadModelOptions } from "./load-options.js";
import { runtimeMlx } from "./mlx.js";

/** The texts verify runs when given no prompts: a short one, and one longer than a prefill chunk of 64. */
export const VERIFY_PROMPTS: readonly string[] = [
  "In the beginning God created the heaven and the earth.",
  "And the earth was without form, and void; and darkness was upon the face of the deep. And the " +
    "Spirit of God moved upon the face of the waters. And God said, Let there be light: and there " +
    "was light. And God saw the light, that it was good: and God divided the light from the " +
    "darkness. And God called the light Day, and the darkness he called Night.",
];

export interface VerifyAgainstMlxOptions {
  /** The checkpoint the chain was converted from: a folder or `hf:owner/name` (default: model.json's source). */
  checkpoint?: string;
  /** The chain's backend (default "auto": Core ML where it runs, else the reference interpreter). */
  backend?: "auto" | "coreml" | "reference";
  /** reference backend: "fp32" (default) or "fp16" (as the ANE rounds). MLX always runs float32. */
  precision?: "fp32" | "fp16";
  computeUnits?: LoadModelOptions["computeUnits"];
  /** Prompts through the packages' prefill function when they have one (default true). */
  prefillFunction?: boolean;
  /** Prompts as token ids (default: VERIFY_PROMPTS through the chain's tokenizer). */
  prompts?: readonly (readonly number[])[];
  /** Greedy tokens fed after each prompt (default 8): each prompt is compared at 1 + decodeSteps positions. */
  decodeSteps?: number;
  /** Fail below this greedy top-1 agreement (default 0.9, as verify against goldens). */
  minAgreement?: number;
  /** Fail below this cosine of the logits (default 0.99; chains with a logits head). */
  minCosine?: number;
  /**
   * Fail when a super-block's output drifts more than this from MLX's (relative L2; default
   * DEFAULT_MAX_DRIFT by the arithmetic the chain computes in).
   */
  maxDrift?: number;
  onProgress?: LoadModelOptions["onProgress"];
  signal?: AbortSignal;
}

/** How far one super-block's outputs are from MLX's hidden state after the same layers. */
export interface SuperBlockDrift {
  readonly name: string;
  /** Its first and last decoder layer (global indices). */
  readonly layers: readonly [number, number];
  /** Largest ‖chain − mlx‖ / ‖mlx‖ over the positions compared. */
  readonly maxDrift: number;
  readonly minCosine: number;
}

export interface MlxVerifyReport {
  readonly chain: string;
  /** The checkpoint folder MLX ran (an `hf:` reference resolved into the HF cache). */
  readonly checkpoint: string;
  readonly backend: BackendInfo;
  /** "fp16" when the chain computes in fp16 anywhere (an fp16 chain, the fp16 interpreter, Core ML). */
  readonly arithmetic: "fp32" | "fp16";
  readonly prompts: { readonly tokens: number }[];
  /** Positions compared (every prompt's last token and each greedy step after it). */
  readonly steps: number;
  readonly top1Agreement: number;
  readonly tokensIdentical: boolean;
  /** NaN for an argmax-only head (no logits to compare). */
  readonly maxAbsLogitDiff: number;
  readonly minCosine: number;
  /** Every super-block, in order; the hidden state of every position of every sequence is compared. */
  readonly superBlocks: readonly SuperBlockDrift[];
  /** The first super-block whose drift is over maxDrift: where the chain departs from the checkpoint. */
  readonly firstDrifting: string | undefined;
  readonly thresholds: { minAgreement: number; minCosine?: number; maxDrift: number };
  readonly passed: boolean;
}

/**
 * Default maxDrift. fp32 programs match MLX to rounding (≤ 4e-6 on the fixtures); fp16 ones carry
 * fp16's error through every layer (≤ 2.5e-2 on the fixtures with the fp16 interpreter).
 */
export const DEFAULT_MAX_DRIFT = { fp32: 1e-3, fp16: 5e-2 } as const;

/**
 * Runs `chain` (a folder written by `convert`) and its source checkpoint on MLX over the same
 * prompts and compares them; see MlxVerifyReport. Needs runtime-mlx (MLX installed).
 */
export async function verifyAgainstMlx(
  chain: string,
  options: VerifyAgainstMlxOptions = {},
): Promise<MlxVerifyReport> {
  const manifest = await readChainManifest(chain);
  const mlx = await runtimeMlx(chain);
  const ref = options.checkpoint ?? manifest.source.model;
  let dir: string;
  try {
    dir = await resolveModelRef(ref, { onProgress: options.onProgress, signal: options.signal });
  } catch (err) {
    throw new ModelLoadError(ref, `the checkpoint to verify against: ${(err as Error).message}`, {
      cause: err,
    });
  }
  checkIsSource(ref, dir, manifest);
  const precision = options.precision ?? "fp32";
  const decodeSteps = options.decodeSteps ?? 8;
  const minAgreement = options.minAgreement ?? 0.9;
  const minCosine = options.minCosine ?? 0.99;
  const blocks = manifest.components.filter((c) => c.kind === "superblocks");
  const hidden = new Map<string, Map<number, Float32Array>>(blocks.map((b) => [b.name, new Map()]));
  const loaded = await loadModel(chain, {
    backend: options.backend ?? "auto",
    precision,
    computeUnits: options.computeUnits,
    prefillFunction: options.prefillFunction,
    tokenizer: false,
    wrapBackend: (b) => recordingBackend(b, (name, row, h) => hidden.get(name)?.set(row, h)),
    onProgress: options.onProgress,
    signal: options.signal,
  });
  // fp16 wherever any of the program's arithmetic is: an fp16 chain, the fp16 interpreter, Core ML
  const arithmetic =
    manifest.dtype === "fp16" || precision === "fp16" || loaded.backend.name === "coreml" ? "fp16" : "fp32";
  const maxDrift = options.maxDrift ?? DEFAULT_MAX_DRIFT[arithmetic];
  try {
    const model = await mlx.loadMlxModel(dir, {
      dtype: "float32",
      contextLength: manifest.ctx,
      onProgress: (p) => options.onProgress?.({ stage: "weights", done: p.done, total: p.total }),
      signal: options.signal,
    });
    try {
      const limit = Math.min(loaded.contextLength, manifest.ctx) - decodeSteps;
      const prompts = (options.prompts ?? (await defaultPrompts(chain, manifest))).map((p) =>
        p.slice(0, Math.max(1, limit)),
      );
      const logitsHead = !manifest.argmax;
      let steps = 0;
      let agree = 0;
      let maxDiff = 0;
      let minCos = 1;
      const drift = blocks.map((b) => ({ name: b.name, layers: b.io.layers, maxDrift: 0, minCosine: 1 }));
      for (const prompt of prompts) {
        options.signal?.throwIfAborted();
        // MLX's greedy continuation, then one traced pass over prompt + continuation
        const fed = [...prompt];
        let out = await model.prefill(prompt, { signal: options.signal });
        for (let i = 0; i < decodeSteps; i++) {
          if (!("logits" in out)) throw new Error("verifyAgainstMlx: MLX returned no logits");
          fed.push(argmax(out.logits));
          out = await model.decode(fed.at(-1)!, { signal: options.signal });
        }
        model.reset();
        const trace = await mlx.traceMlx(
          model,
          fed,
          blocks.map((b) => Math.max(...b.io.layers) + 1),
        );
        const V = manifest.model.vocabSize;
        const row = (p: number) => trace.logits.subarray(p * V, (p + 1) * V);
        // the chain, teacher-forced with the same tokens
        loaded.model.reset();
        for (const m of hidden.values()) m.clear();
        for (let i = 0; i <= decodeSteps; i++) {
          const at = prompt.length - 1 + i;
          const step =
            i === 0
              ? await loaded.model.prefill(prompt, { signal: options.signal })
              : await loaded.model.decode(fed[at], { signal: options.signal });
          const want = row(at);
          steps++;
          if ("logits" in step) {
            if (argmax(step.logits) === argmax(want)) agree++;
            maxDiff = Math.max(maxDiff, maxAbsDiff(step.logits, want));
            minCos = Math.min(minCos, cosine(step.logits, want));
          } else if (step.top1.id === argmax(want)) agree++;
        }
        const D = manifest.model.hiddenSize;
        for (const [b, d] of drift.entries()) {
          const rows = hidden.get(d.name)!;
          const ref = trace.hidden[b];
          for (let p = 0; p < fed.length; p++) {
            const got = rows.get(p); // the chain ran every position fed
            if (!got) throw new Error(`verifyAgainstMlx: ${d.name} recorded no output for position ${p}`);
            const want = ref.subarray(p * D, (p + 1) * D);
            d.maxDrift = Math.max(d.maxDrift, relativeL2(got, want));
            d.minCosine = Math.min(d.minCosine, cosine(got, want));
          }
        }
      }
      const superBlocks = drift.map((d) => ({
        name: d.name,
        layers: [Math.min(...d.layers), Math.max(...d.layers)] as const,
        maxDrift: d.maxDrift,
        minCosine: d.minCosine,
      }));
      const firstDrifting = superBlocks.find((d) => !(d.maxDrift <= maxDrift))?.name;
      const top1Agreement = agree / steps;
      return {
        chain,
        checkpoint: dir,
        backend: loaded.backend,
        arithmetic,
        prompts: prompts.map((p) => ({ tokens: p.length })),
        steps,
        top1Agreement,
        tokensIdentical: agree === steps,
        maxAbsLogitDiff: logitsHead ? maxDiff : Number.NaN,
        minCosine: logitsHead ? minCos : Number.NaN,
        superBlocks,
        firstDrifting,
        thresholds: { minAgreement, ...(logitsHead ? { minCosine } : {}), maxDrift },
        passed:
          top1Agreement >= minAgreement &&
          (!logitsHead || minCos >= minCosine) &&
          firstDrifting === undefined,
      };
    } finally {
      await model.dispose();
    }
  } finally {
    await loaded.dispose();
  }
}

/** ‖a − b‖ / ‖b‖. */
function relativeL2(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dd = 0;
  let bb = 0;
  for (let i = 0; i < b.length; i++) {
    dd += (a[i] - b[i]) ** 2;
    bb += b[i] * b[i];
  }
  return Math.sqrt(dd / Math.max(bb, Number.MIN_VALUE));
}

/** The checkpoint must be the one the chain was converted from (model.json keeps its config's sha256). */
function checkIsSource(ref: string, dir: string, manifest: ChainManifest): void {
  const config = join(dir, "config.json");
  if (!existsSync(config)) throw new ModelLoadError(ref, "no config.json: not a Qwen3.5 checkpoint");
  const sha = createHash("sha256").update(readFileSync(config)).digest("hex");
  if (sha !== manifest.source.configSha256) {
    throw new ModelLoadError(
      ref,
      "its config.json is not the one this chain was converted from (model.json's source.configSha256)",
    );
  }
}

/** VERIFY_PROMPTS through the chain's tokenizer; without one, fixed ids spread over the vocabulary. */
async function defaultPrompts(chain: string, manifest: ChainManifest): Promise<number[][]> {
  if (existsSync(join(chain, "tokenizer.json"))) {
    const tokenizer = await loadTokenizer(chain, { eosTokenIds: [...manifest.tokenizer.eosTokenIds] });
    return VERIFY_PROMPTS.map((text) => tokenizer.encode(text));
  }
  const V = manifest.model.vocabSize;
  return [12, 80].map((n, k) => Array.from({ length: n }, (_, i) => (i * 7919 + k * 104729 + 1) % V));
}

type Record_ = (component: string, row: number, hidden: Float32Array) => void;

/**
 * `inner` with every super-block prediction's hidden output recorded by KV row (position): decode
 * steps give one row, prefill calls T rows from their position on (rows past the tokens fed are
 * padding; they are overwritten or never looked up).
 */
function recordingBackend(inner: Backend, record: Record_): Backend {
  const hiddenOut = (io: ComponentIO) => io.outputs.find((t) => t.role.kind === "hidden_out")?.name;
  const recorded = (name: string, out: string | undefined, r: Record<string, Tensor>, position = 0) => {
    const h = out === undefined ? undefined : r[out];
    if (!h) return r;
    const [, D, , T] = h.shape;
    const values = toFloat32(h.dtype, h.data);
    for (let i = 0; i < T; i++) {
      const row = new Float32Array(D);
      for (let d = 0; d < D; d++) row[d] = values[d * T + i];
      record(name, position + i, row);
    }
    return r;
  };
  return {
    name: inner.name,
    transfers: () => inner.transfers(),
    async load(path, o): Promise<LoadedComponent> {
      const c = await inner.load(path, o);
      const out = hiddenOut(o.io);
      if (out === undefined) return c; // the lm_head
      const f = c.prefill;
      const prefillOut = f && hiddenOut(f.io);
      return {
        newState: (plan) => c.newState(plan),
        predict: async (inputs, state, position) =>
          recorded(o.name, out, await c.predict(inputs, state, position), position),
        prefill: f && {
          io: f.io,
          tokens: f.tokens,
          predict: async (inputs, state, position) =>
            recorded(o.name, prefillOut, await f.predict(inputs, state, position), position),
        },
        dispose: () => c.dispose(),
      };
    },
  };
}

/**
 * The tiny Qwen3.5 fixtures (<repo>/fixtures/tiny-*, see fixtures/README.md): HF-layout checkpoints
 * plus golden outputs from Hugging Face transformers (fp32) and mlx-lm.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type MxArray, mx } from "../src/index.js";

export const REPO_ROOT = resolve(fileURLToPath(new URL("../../..", import.meta.url)));
export const FIXTURES = ["tiny-tied", "tiny-gqa", "tiny-moe", "tiny-trained"] as const;
export type FixtureName = (typeof FIXTURES)[number];
/** The fixtures without an lm_head.weight (the head is the embedding). */
export const TIED: readonly FixtureName[] = ["tiny-tied", "tiny-trained"];

export const fixtureDir = (name: FixtureName): string => join(REPO_ROOT, "fixtures", name);

export interface Golden {
  promptIds: number[];
  generatedIds: number[];
  /** [T, V] */
  promptLogits: Float32Array;
  /** [N, V] */
  decodeLogits: Float32Array;
  /** [L + 1, T, D] */
  hiddenStates: Float32Array;
  mlxPromptLogits: Float32Array;
  mlxDecodeLogits: Float32Array;
  json: { prompt: { messages: unknown; chat_template: boolean }; n_decode_steps: number };
}

export function readGolden(name: FixtureName): Golden {
  const dir = fixtureDir(name);
  const { arrays } = mx.loadSafetensors(join(dir, "golden.safetensors"));
  const f32 = (k: string) => arrays[k].toTypedArray() as Float32Array;
  const ints = (k: string) => Array.from(arrays[k].toTypedArray() as BigInt64Array, Number);
  try {
    return {
      promptIds: ints("prompt_ids"),
      generatedIds: ints("generated_ids"),
      promptLogits: f32("prompt_logits"),
      decodeLogits: f32("decode_logits"),
      hiddenStates: f32("hidden_states"),
      mlxPromptLogits: f32("mlx_prompt_logits"),
      mlxDecodeLogits: f32("mlx_decode_logits"),
      json: JSON.parse(readFileSync(join(dir, "golden.json"), "utf8")),
    };
  } finally {
    mx.dispose(arrays);
  }
}

export function maxAbsDiff(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  offsetB = 0,
  length = a.length,
): number {
  let d = 0;
  for (let i = 0; i < length; i++) d = Math.max(d, Math.abs(a[i] - b[offsetB + i]));
  return d;
}

export function argmax(a: ArrayLike<number>, offset = 0, length = a.length - offset): number {
  let best = offset;
  for (let i = offset + 1; i < offset + length; i++) if (a[i] > a[best]) best = i;
  return best - offset;
}

export function logitsOf(out: unknown): Float32Array {
  if (out && typeof out === "object" && "logits" in out) return (out as { logits: Float32Array }).logits;
  throw new Error("expected a logits step output");
}

/**
 * Writes a copy of a fixture's HF checkpoint into `out` (one model.safetensors, config and tokenizer
 * files), with `edit` applied to the tensor map first (delete, replace, rename entries).
 */
export function copyFixture(
  name: FixtureName,
  out: string,
  edit: (tensors: Map<string, MxArray>) => void = () => {},
): string {
  const src = fixtureDir(name);
  const tensors = new Map<string, MxArray>();
  for (const f of readdirSync(src).filter((f) => f.startsWith("model") && f.endsWith(".safetensors"))) {
    for (const [k, v] of Object.entries(mx.loadSafetensors(join(src, f)).arrays)) tensors.set(k, v);
  }
  try {
    edit(tensors);
    mkdirSync(out, { recursive: true });
    mx.saveSafetensors(join(out, "model.safetensors"), Object.fromEntries(tensors));
    for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]) {
      if (existsSync(join(src, f))) copyFileSync(join(src, f), join(out, f));
    }
    return out;
  } finally {
    mx.dispose([...tensors.values()]);
  }
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `runtime-mlx-${prefix}-`));
}

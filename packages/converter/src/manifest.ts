/**
 * model.json, the chain manifest a runtime reads (schema in @anemll-qwen35/ir/chain): where the
 * chain came from, the options that shaped it, its quantization record, every component and the
 * tokenizer files — and the EOS ids gathered from the checkpoint's config and tokenizer files.
 */

import { existsSync } from "node:fs";
import { copyFile, readFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import {
  CHAIN_FORMAT,
  CHAIN_FORMAT_VERSION,
  type ChainManifest,
  type ChainManifestComponent,
  type LmHeadSplit,
} from "@anemll-qwen35/ir/chain";
import type { Qwen35Config } from "@anemll-qwen35/ir/checkpoint";
import type { ResolvedConvert } from "./options.js";
import { type QuantPlan, quantizationRecord } from "./quant/plan.js";

export const CONVERTER_VERSION = "0.1.0";

/** The tokenizer files a chain carries when the checkpoint has them. */
const TOKENIZER_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "chat_template.jinja",
  "generation_config.json",
];

/** EOS ids: the config's, generation_config's and the tokenizer's eos_token (Qwen3.5: 248046, 248044). */
export async function eosTokenIds(dir: string, fromConfig: readonly number[]): Promise<number[]> {
  const ids = new Set(fromConfig);
  const readJson = async (f: string) => {
    try {
      return JSON.parse(await readFile(join(dir, f), "utf8")) as Record<string, unknown>;
    } catch {
      return undefined;
    }
  };
  const gen = await readJson("generation_config.json");
  const genEos = gen?.eos_token_id;
  for (const id of Array.isArray(genEos) ? genEos : genEos === undefined ? [] : [genEos]) ids.add(Number(id));
  const tc = await readJson("tokenizer_config.json");
  const tok = await readJson("tokenizer.json");
  const eos =
    typeof tc?.eos_token === "string" ? tc.eos_token : (tc?.eos_token as { content?: string })?.content;
  const added = (Array.isArray(tok?.added_tokens) ? tok.added_tokens : []) as {
    id: number;
    content: string;
  }[];
  const hit = added.find((t) => t.content === eos);
  if (hit) ids.add(hit.id);
  return [...ids].filter((n) => Number.isInteger(n)).sort((a, b) => a - b);
}

/** Copies the checkpoint's tokenizer files and config.json into `to`; returns the tokenizer files copied. */
export async function copyChainFiles(dir: string, to: string): Promise<string[]> {
  const copied: string[] = [];
  for (const f of TOKENIZER_FILES) {
    if (existsSync(join(dir, f))) {
      await copyFile(join(dir, f), join(to, f));
      copied.push(f);
    }
  }
  await copyFile(join(dir, "config.json"), join(to, "config.json"));
  return copied;
}

export interface ManifestInputs {
  /** The model as the user named it (a path is recorded absolute). */
  readonly model: string;
  /** The checkpoint folder it resolved to (an hf: snapshot folder is named by its revision). */
  readonly dir: string;
  readonly config: Qwen35Config;
  readonly configSha256: string;
  readonly tiedEmbeddings: boolean;
  readonly options: ResolvedConvert;
  readonly plan: QuantPlan;
  readonly lmHeadSplit?: LmHeadSplit;
  readonly components: readonly ChainManifestComponent[];
  /** The MTP head's package and the drafts per verify call (absent: converted without the head). */
  readonly speculative?: { readonly draftTokens: number; readonly mtp: ChainManifestComponent };
  readonly tokenizerFiles: readonly string[];
  readonly eosTokenIds: readonly number[];
}

/** model.json's contents. */
export function chainManifest(m: ManifestInputs): ChainManifest {
  const r = m.options;
  const ref = m.model.startsWith("hf:") ? m.model : resolve(m.model);
  return {
    format: CHAIN_FORMAT,
    formatVersion: CHAIN_FORMAT_VERSION,
    converter: { name: "@anemll-qwen35/converter", version: CONVERTER_VERSION },
    source: {
      model: ref,
      revision: ref.startsWith("hf:") ? basename(m.dir) : undefined,
      configSha256: m.configSha256,
    },
    model: {
      modelType: m.config.modelType,
      hiddenSize: m.config.hiddenSize,
      numLayers: m.config.numHiddenLayers,
      vocabSize: m.config.vocabSize,
      superBlocks: m.config.superBlocks.length,
      tiedEmbeddings: m.tiedEmbeddings,
    },
    ctx: r.ctx,
    buckets: [...r.buckets],
    fuse: r.fuse,
    state: r.state,
    dtype: r.dtype,
    attention: r.attention,
    ...(r.prefillBatch > 0 ? { prefill: { tokens: r.prefillBatch, gdn: r.gdnPrefill } } : {}),
    quantization: quantizationRecord(m.plan, r.quantSpec),
    argmax: r.argmax,
    lmHeadSplit: m.lmHeadSplit,
    components: [...m.components],
    ...(m.speculative ? { speculative: m.speculative } : {}),
    tokenizer: {
      files: [...m.tokenizerFiles],
      eosTokenIds: [...m.eosTokenIds],
      chatTemplate: m.tokenizerFiles.includes("chat_template.jinja") ? "chat_template.jinja" : undefined,
    },
  };
}

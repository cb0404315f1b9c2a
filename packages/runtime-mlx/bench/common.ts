/** What the benchmarks share: the scaled MoE checkpoint, seeded prompts, medians, machine facts. */
import { cpus, loadavg, totalmem } from "node:os";
import { defaultSyntheticDir, publishedConfigJson, writeSyntheticCheckpoint } from "@anemll-qwen35/testkit";

/** Folder name (under the synthetic cache) of the scaled MoE below. */
export const MOE_BENCH_NAME = "moe-256x8-bench";

/** The scaled-down 35B-A3B-style MoE: 256 experts, top-8, everything else divided down (see README). */
export function moeBenchConfig(): Record<string, unknown> {
  const config = publishedConfigJson("35b-a3b") as { text_config: Record<string, unknown> } & Record<
    string,
    unknown
  >;
  const layers = 8;
  config.text_config = {
    ...config.text_config,
    hidden_size: 512,
    num_hidden_layers: layers,
    layer_types: Array.from({ length: layers }, (_, i) =>
      (i + 1) % 4 === 0 ? "full_attention" : "linear_attention",
    ),
    num_attention_heads: 4,
    num_key_value_heads: 1,
    linear_num_key_heads: 4,
    linear_num_value_heads: 8,
    num_experts: 256,
    num_experts_per_tok: 8,
    moe_intermediate_size: 128,
    shared_expert_intermediate_size: 128,
    vocab_size: 62080,
    // the published EOS id (248044) lies beyond the smaller vocabulary, which config checks refuse
    eos_token_id: 62079,
  };
  (config.vision_config as Record<string, unknown>).out_hidden_size = 512;
  return config;
}

/** Writes the scaled MoE's random-weight checkpoint unless it is there; returns its folder. */
export async function ensureMoeBenchCheckpoint(): Promise<string> {
  const r = await writeSyntheticCheckpoint({
    config: moeBenchConfig(),
    out: defaultSyntheticDir(MOE_BENCH_NAME),
    mtp: false,
    vision: false,
  });
  if (!r.skipped) console.log(`wrote ${r.dir} (${(r.bytes / 1e9).toFixed(2)} GB)`);
  return r.dir;
}

/** Median of the values. */
export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** n ids in [0, range) from a seeded LCG: the same prompt in every run. */
export function seededIds(n: number, range: number, seed: number): number[] {
  let s = seed >>> 0;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(s % range);
  }
  return out;
}

/** The machine a result was measured on, with the load average at the start and now, and a caveat. */
export function machineFacts(loadAverageStart: number[], note: string): Record<string, unknown> {
  return {
    cpus: cpus().length,
    cpu_model: cpus()[0]?.model,
    memory_gb: totalmem() / 1e9,
    load_average_start: loadAverageStart,
    load_average_end: loadavg(),
    node: process.version,
    note,
  };
}

/**
 * The `mtp` component: Qwen3.5's multi-token-prediction head (tools/oracle/README.md "The MTP
 * head"; vLLM qwen3_5_mtp.py), one position a call:
 *   h   = norm(hidden)  (the trunk's pre-norm state; the head's own output when `normed` = 1)
 *   x   = fc(concat(pre_fc_norm_embedding(embedding), pre_fc_norm_hidden(h)))   embedding first
 *   x   = mtp.layers.0(x)      a full-attention decoder layer with its own KV cache (io)
 *   out = mtp.norm(x)          → hidden_out: what the lm_head's verify function scores (normed = 1)
 *                                and what the next recursive draft step feeds back
 * The pair (hidden_t, token t+1) runs at RoPE position t and writes cache row t (vLLM's target
 * positions). The head's layer is numbered after the trunk's (graph/weights.ts canonical()), so
 * superblock.ts's decoderLayer builds it. Its own package, not functions of the lm_head's: the
 * vocabulary projection is then in one place (Core ML keeps a weight copy per loaded function).
 */
import type { ComponentIO, IoTensor } from "@anemll-qwen35/ir/chain";
import { mtpLayerCount } from "@anemll-qwen35/ir/checkpoint";
import { type MilBuilder, type MilVar, tensorType } from "@anemll-qwen35/ir/mil";
import { UnsupportedModelError } from "../errors.js";
import type { ResolvedOptions } from "../options.js";
import { conv1x1, MASK_NEG, scalar } from "./ane.js";
import type { KvCache } from "./attention.js";
import { rmsNorm1p } from "./norms.js";
import { decoderLayer } from "./superblock.js";
import { kvNewOutputs, ropeInputs, type StepOutputs } from "./superblock-io.js";
import type { GraphWeights } from "./weights.js";

/**
 * x where `normed` is 1, else norm(x) — (1 − s)·n + s·x is exact for s ∈ {0, 1} in fp16 too, so
 * one function serves the trunk's pre-norm hidden state and the head's own (normed) output.
 */
export async function finalNormUnlessNormed(
  w: GraphWeights,
  x: MilVar,
  normed: MilVar,
  name: string,
): Promise<MilVar> {
  const b: MilBuilder = w.b;
  const n = await rmsNorm1p(w, "norm", x, `${name}_final_norm`);
  const keep = b.sub({ x: scalar(1, normed), y: normed, name: `${name}_unnormed` });
  return b.add({
    x: b.mul({ x: n, y: keep, name: `${name}_trunk` }),
    y: b.mul({ x, y: normed, name: `${name}_head` }),
    name,
  });
}

export async function buildMtp(w: GraphWeights, o: ResolvedOptions): Promise<ComponentIO> {
  const b = w.b;
  const cfg = w.source.config;
  if (mtpLayerCount(cfg) !== 1)
    throw new UnsupportedModelError(
      cfg.modelType,
      `the converter builds a one-layer MTP head (every Qwen3.5 release); this config has mtp_num_hidden_layers ${mtpLayerCount(cfg)} (convert with --no-mtp)`,
    );
  const D = cfg.hiddenSize;
  const dt = o.dtype;
  const L = cfg.numHiddenLayers; // the head's layer, numbered after the trunk's
  const { numKeyValueHeads: Hkv, headDim: hd } = cfg;
  const ins: IoTensor[] = [];
  const outs: IoTensor[] = [];
  const input = (t: IoTensor) => {
    ins.push(t);
    return b.input(t.name, tensorType(t.dtype, t.shape));
  };
  const output = (t: IoTensor, v: MilVar) => {
    outs.push(t);
    b.output(t.name, v);
  };
  const hidden = input({ name: "hidden", dtype: dt, shape: [1, D, 1, 1], role: { kind: "hidden_in" } });
  const embedding = input({ name: "embedding", dtype: dt, shape: [1, D, 1, 1], role: { kind: "embedding" } });
  const normed = input({ name: "normed", dtype: dt, shape: [1, 1, 1, 1], role: { kind: "normed" } });
  const rope = ropeInputs(input, cfg, dt, 1);
  const keys = o.ctx + 1;
  const mask = input({
    name: "mask",
    dtype: dt,
    shape: [1, 1, 1, keys],
    role: { kind: "mask", rule: "io", keys, maskValue: MASK_NEG },
  });
  const [k, v] = (["k", "v"] as const).map((part) =>
    input({
      name: `kv${L}_${part}`,
      dtype: dt,
      shape: [1, Hkv, o.ctx, hd],
      role: { kind: "kv_cache", layer: L, part },
    }),
  );
  const cache: KvCache = { k, v };

  const h = await finalNormUnlessNormed(w, hidden, normed, "hidden_normed");
  const e = await rmsNorm1p(w, "mtp.pre_fc_norm_embedding.weight", embedding, "pre_fc_norm_embedding");
  const hn = await rmsNorm1p(w, "mtp.pre_fc_norm_hidden.weight", h, "pre_fc_norm_hidden");
  const joined = b.concat({ values: [e, hn], axis: 1, name: "fc_in" }); // [1, 2D, 1, 1]: embedding first
  const x = conv1x1(b, joined, await w.conv1x1Weight("mtp.fc.weight"), "fc"); // [1, D, 1, 1]
  const produced: StepOutputs = { gdn: new Map(), attention: new Map() };
  const step = {
    rope,
    mask,
    gdn: new Map(),
    kv: new Map([[L, cache]]),
    attention: o.attention,
    mlpMaxChannels: o.mlpMaxChannels,
  };
  const y = await decoderLayer(w, L, x, step, produced);
  const out = await rmsNorm1p(w, "mtp.norm.weight", y, "mtp_norm");

  output({ name: "hidden_out", dtype: dt, shape: [1, D, 1, 1], role: { kind: "hidden_out" } }, out);
  const a = produced.attention.get(L);
  if (!a) throw new UnsupportedModelError(cfg.modelType, "the MTP layer produced no attention step");
  kvNewOutputs(output, L, a, dt, [1, Hkv, 1, hd]);
  return {
    component: "mtp",
    dtype: dt,
    ctx: o.ctx,
    state: "io",
    layers: [L],
    superBlocks: [],
    inputs: ins,
    outputs: outs,
    states: [],
    notes: [
      "the pair (hidden_t, token t+1) runs at RoPE position t and writes KV row t of the head's own cache (io in every placement); the mask is the io rule for position t",
      "hidden: the trunk's pre-norm hidden state with normed = 0 (the head applies the final norm), or the head's own hidden_out with normed = 1 (a recursive draft step)",
      "hidden_out is after mtp.norm: score it with the lm_head's verify function, its row's normed = 1",
    ],
  };
}

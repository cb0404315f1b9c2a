/**
 * A model's quantization plan: the policy applied once to every tensor. Each tensor gets the
 * encoding its deciding rule gives it with nothing left to default (the LUT group size: the
 * rule's, else the policy's, else 8) and its stored size. Everything after the policy reads this
 * plan rather than asking the policy again: the package size budget (plan.ts), the encoder
 * (graph/weights.ts → encode.ts), the lm_head's pieces (graph/lm-head.ts, the lm_head sweep), the
 * conversion's progress and log, and model.json's `quantization` record.
 */
import { AnemllError, numel } from "@anemll-qwen35/core";
import type { ChainManifest } from "@anemll-qwen35/ir/chain";
import {
  mtpLayerCount,
  type Qwen35Config,
  qwen35MtpParameters,
  qwen35Parameters,
} from "@anemll-qwen35/ir/checkpoint";
import type { LutBits } from "./palettize.js";
import {
  DEFAULT_LUT_GROUP_SIZE,
  formatQuantSpec,
  formatWeightQuant,
  NO_QUANT,
  PLAIN_POLICY,
  patternMatches,
  type QuantPolicy,
  type QuantSpec,
  quantFor,
  type WeightQuant,
} from "./policy.js";

/** One tensor's encoding, resolved: every default applied. */
export type TensorEncoding =
  | { readonly kind: "none" }
  /**
   * groupSize: output channels per LUT as asked (a piece whose rows it does not divide uses their
   * gcd when encoded); perTensor: one LUT for the whole tensor.
   */
  | { readonly kind: "lut"; readonly bits: LutBits; readonly groupSize: number; readonly perTensor: boolean }
  /** blockSize: input values per scale (undefined: the whole row, one scale per output channel). */
  | { readonly kind: "int8"; readonly blockSize?: number };

export interface PlannedTensor {
  readonly canonical: string;
  /** Its role in ir's parameter table (`lm_head` for the head, tied or not). */
  readonly role: string;
  /** Decoder layer, or -1 (embedding, final norm, head). */
  readonly layer: number;
  readonly shape: readonly number[];
  /** Whether the policy decides it: the projections, the embedding and the head. Other tensors are plain. */
  readonly byPolicy: boolean;
  /** The encoding as the deciding rule writes it (plain when no rule matches). */
  readonly quant: WeightQuant;
  readonly encoding: TensorEncoding;
  /** Estimated stored bytes: the payload plus its LUTs or scales. */
  readonly bytes: number;
}

export interface QuantPlan {
  readonly policy: QuantPolicy;
  /** Every tensor of the model in checkpoint order, then `lm_head` (a tied head is stored again). */
  readonly tensors: readonly PlannedTensor[];
  /** The tensor `canonical` ("lm_head": the head, tied or not); throws for a name the model lacks. */
  tensor(canonical: string): PlannedTensor;
}

/** Stored bytes of `params` weights in `rows` output channels: payload plus LUT/scale overhead. */
export function bytesFor(params: number, encoding: TensorEncoding, rows: number): number {
  switch (encoding.kind) {
    case "none":
      return params * 2;
    case "int8":
      return params + Math.ceil(params / (encoding.blockSize ?? params / rows)) * 2;
    case "lut": {
      const luts = encoding.perTensor ? 1 : Math.ceil(rows / encoding.groupSize);
      return Math.ceil((params * encoding.bits) / 8) + luts * 2 ** encoding.bits * 2;
    }
  }
}

function resolve(q: WeightQuant, policy: QuantPolicy): TensorEncoding {
  if (q.kind !== "lut") return q;
  const groupSize = q.groupSize ?? policy.groupSize ?? DEFAULT_LUT_GROUP_SIZE;
  return { kind: "lut", bits: q.bits, groupSize, perTensor: q.perTensor ?? false };
}

/**
 * Resolves `policy` for every tensor of `config`'s model, and with `mtp` of its MTP head (after
 * lm_head; its layer numbered after the trunk's).
 */
export function planQuant(config: Qwen35Config, policy: QuantPolicy, o: { mtp?: boolean } = {}): QuantPlan {
  const params = qwen35Parameters(config, { tied: true });
  const head = { canonical: "lm_head", role: "lm_head", layer: -1, shape: params[0].shape, kind: "lm_head" };
  const mtp = o.mtp ? qwen35MtpParameters(config, { layers: mtpLayerCount(config) }) : [];
  const tensors = [...params, head, ...mtp].map((p): PlannedTensor => {
    const byPolicy = p.kind === "projection" || p.kind === "embedding" || p.kind === "lm_head";
    const quant = byPolicy ? quantFor(policy, p) : NO_QUANT;
    const encoding = resolve(quant, policy);
    const bytes = bytesFor(numel(p.shape), encoding, p.shape[0]);
    return {
      canonical: p.canonical,
      role: p.role,
      layer: p.layer,
      shape: p.shape,
      byPolicy,
      quant,
      encoding,
      bytes,
    };
  });
  const byName = new Map(tensors.map((t) => [t.canonical, t]));
  return {
    policy,
    tensors,
    tensor(canonical) {
      const t = byName.get(canonical);
      if (!t)
        throw new AnemllError(
          "E_UNKNOWN_TENSOR",
          `"${canonical}" is not a tensor of this Qwen3.5 text model`,
        );
      return t;
    },
  };
}

/** `quant` as a plan: a plan as it is, a policy planned for `config` (none: everything plain). */
export function asQuantPlan(
  config: Qwen35Config,
  quant: QuantPolicy | QuantPlan = PLAIN_POLICY,
  o: { mtp?: boolean } = {},
): QuantPlan {
  return "tensors" in quant ? quant : planQuant(config, quant, o);
}

/**
 * Rows a tensor's pieces are cut in (the lm_head's vocabulary pieces): whole LUT groups, so no
 * group straddles two pieces; 8 otherwise.
 */
export function pieceUnit(e: TensorEncoding): number {
  return e.kind === "lut" && !e.perTensor ? e.groupSize : 8;
}

/** The short spelling of a resolved encoding, with its group size: `lut6,8`, `lut4,per-tensor`, `int8,64`, `none`. */
export function formatEncoding(e: TensorEncoding): string {
  if (e.kind !== "lut" || e.perTensor) return formatWeightQuant(e);
  return formatWeightQuant({ kind: "lut", bits: e.bits, groupSize: e.groupSize });
}

/**
 * What a plan gives every tensor the policy decides, compactly: role → encoding where all of a
 * role's tensors agree, else canonical name → encoding for each of that role's tensors.
 */
export function describePlan(plan: QuantPlan): Record<string, string> {
  const byRole = new Map<string, { canonical: string; enc: string }[]>();
  for (const t of plan.tensors) {
    if (!t.byPolicy) continue;
    const list = byRole.get(t.role) ?? [];
    list.push({ canonical: t.canonical, enc: formatEncoding(t.encoding) });
    byRole.set(t.role, list);
  }
  const out: Record<string, string> = {};
  for (const [role, list] of byRole) {
    if (list.every((x) => x.enc === list[0].enc)) out[role] = list[0].enc;
    else for (const x of list) out[x.canonical] = x.enc;
  }
  return out;
}

/**
 * model.json's `quantization`: the policy as written (`spec`), the encoding the plan gives each
 * role (or tensor, where a role's tensors differ), and the one-word summaries `body` (one
 * encoding, or "mixed"), `lmHead` and `embed` as their rules write them.
 */
export function quantizationRecord(plan: QuantPlan, spec: QuantSpec): ChainManifest["quantization"] {
  const rule = (canonical: string) => formatWeightQuant(plan.tensor(canonical).quant);
  const body = new Set(
    plan.tensors
      .filter((t) => t.byPolicy && patternMatches("body", t))
      .map((t) => formatWeightQuant(t.quant)),
  );
  return {
    body: body.size === 1 ? [...body][0] : "mixed",
    lmHead: rule("lm_head"),
    embed: rule("embed"),
    groupSize: plan.policy.groupSize ?? DEFAULT_LUT_GROUP_SIZE,
    policy: formatQuantSpec(spec),
    encodings: describePlan(plan),
  };
}

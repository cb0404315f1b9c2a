/**
 * How each weight is stored in a package: a quantization policy. A weight is plain (the graph
 * dtype), a k-means LUT (iOS18 `constexpr_lut_to_dense`, grouped by output channels as ANEMLL
 * does) or linear int8 (iOS18 `constexpr_blockwise_shift_scale`).
 *
 * A policy is a preset followed by rules `pattern=encoding`; for each tensor the last rule whose
 * pattern matches wins (nothing matching: plain). A pattern is
 *   - a group: `body` (every projection inside a decoder layer), `gdn`, `attn`, `mlp`, `moe`
 *     (that block's projections), `lm_head` (also `head`, `lmhead`), `embed`, `*` (everything);
 *   - or a glob (`*` any run of characters, `?` one) over the tensor's role in ir's parameter
 *     table (`gdn.in_proj_qkv`, `attn.o_proj`, `mlp.down_proj`, …) or its canonical name, with or
 *     without `.weight` (`layers.3.self_attn.q_proj`, `layers.*.mlp.down_proj`).
 *
 * The text form, as the CLI takes it: `[preset,]pattern=encoding,…`, e.g.
 * `default,gdn.in_proj_qkv=lut8,lm_head=lut4` or `body=lut4,gdn.in_proj_a=fp16` (no preset named:
 * `default`). Encodings: `none`/`fp16`/`fp32` (plain), `lut<2|4|6|8>[,<group>|,per-tensor]`,
 * `int8[,<block>]` — the number after a comma belongs to the encoding before it.
 */
import { GraphOptionError } from "../errors.js";
import type { LutBits } from "./palettize.js";

export type WeightQuant =
  | { readonly kind: "none" }
  /** groupSize: output channels sharing one LUT (default: the policy's, 8); perTensor: one LUT. */
  | {
      readonly kind: "lut";
      readonly bits: LutBits;
      readonly groupSize?: number;
      readonly perTensor?: boolean;
    }
  /** blockSize: input values sharing one scale (default: the whole row, i.e. per output channel). */
  | { readonly kind: "int8"; readonly blockSize?: number };

export interface QuantRule {
  readonly pattern: string;
  readonly quant: WeightQuant;
}

export interface QuantPolicy {
  /** Rules in order; the last one matching a tensor decides. */
  readonly rules: readonly QuantRule[];
  /** Output channels per LUT for LUT rules that name none (default 8, ANEMLL's). */
  readonly groupSize?: number;
}

/** A weight as the policy sees it: its canonical name and its role in ir's parameter table. */
export interface WeightTarget {
  readonly canonical: string;
  readonly role: string;
}

export const NO_QUANT: WeightQuant = { kind: "none" };
export const DEFAULT_LUT_GROUP_SIZE = 8;
/** Everything plain: what the graph builders use when no policy is given. */
export const PLAIN_POLICY: QuantPolicy = { rules: [] };

const lut = (bits: LutBits): WeightQuant => ({ kind: "lut", bits });

/** GDN in_proj_a / in_proj_b plain: Hv rows each (a few kB), their outputs go through exp and sigmoid into the recurrence. */
const GDN_GATES_PLAIN: readonly QuantRule[] = [
  { pattern: "gdn.in_proj_a", quant: NO_QUANT },
  { pattern: "gdn.in_proj_b", quant: NO_QUANT },
];

/**
 * The converter's default, chosen on learned weights (notes/quantization.md, fixtures/tiny-trained,
 * KL(HF fp32 ‖ converted) over 512 held-out tokens): every projection LUT6 g8 except GDN
 * in_proj_a / in_proj_b, which stay fp16 (+48 kB per 0.8B GDN layer); lm_head LUT6; embedding
 * plain. The hot-path issue's mix ("mixed": LUT4 MLP and attention) had 3.6× its KL for 15 % fewer
 * streamed weight bytes on 0.8B; a LUT4 head doubled the KL of either.
 */
export const DEFAULT_QUANT_RULES: readonly QuantRule[] = [
  { pattern: "body", quant: lut(6) },
  ...GDN_GATES_PLAIN,
  { pattern: "lm_head", quant: lut(6) },
  { pattern: "embed", quant: NO_QUANT },
];

const uniform = (body: WeightQuant, head: WeightQuant): QuantRule[] => [
  { pattern: "body", quant: body },
  { pattern: "lm_head", quant: head },
  { pattern: "embed", quant: NO_QUANT },
];

/** Named starting points of a policy. */
export const QUANT_PRESETS: Readonly<Record<string, readonly QuantRule[]>> = {
  default: DEFAULT_QUANT_RULES,
  /**
   * The hot-path issue's proposal (ane-graph-review R6/R7): GDN in_proj_a/b fp16, in_proj_qkv and
   * out_proj LUT6 (the recurrent path), every other projection — MLP, attention, in_proj_z — LUT4,
   * lm_head LUT6. Smaller than the default, measurably worse (notes/quantization.md).
   */
  mixed: [
    { pattern: "body", quant: lut(4) },
    { pattern: "gdn.in_proj_qkv", quant: lut(6) },
    { pattern: "gdn.out_proj", quant: lut(6) },
    ...GDN_GATES_PLAIN,
    { pattern: "lm_head", quant: lut(6) },
    { pattern: "embed", quant: NO_QUANT },
  ],
  /** Every body projection LUT4, lm_head LUT6 (the converter's default before the trained-model measurement). */
  lut4: uniform(lut(4), lut(6)),
  lut6: uniform(lut(6), lut(6)),
  lut8: uniform(lut(8), lut(8)),
  int8: uniform({ kind: "int8" }, { kind: "int8" }),
  /** Everything plain (fp16 in an fp16 graph). */
  none: [],
  fp16: [],
};

/** Group patterns and the roles they stand for. */
const GROUPS: Readonly<Record<string, (role: string) => boolean>> = {
  // the MTP head's projections (mtp.attn.*, mtp.mlp.*, mtp.fc) are body weights too; `mtp` names them alone
  body: (r) => /^(mtp\.)?(gdn|attn|mlp|moe)\./.test(r) || r === "mtp.fc",
  mtp: (r) => r.startsWith("mtp."),
  gdn: (r) => r.startsWith("gdn."),
  attn: (r) => r.startsWith("attn."),
  mlp: (r) => r.startsWith("mlp."),
  moe: (r) => r.startsWith("moe."),
  lm_head: (r) => r === "lm_head",
  head: (r) => r === "lm_head",
  lmhead: (r) => r === "lm_head",
  embed: (r) => r === "embed",
};

function globRegExp(glob: string): RegExp {
  const body = glob
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${body}$`);
}

/** Whether `pattern` (see the module comment) selects `t`. */
export function patternMatches(pattern: string, t: WeightTarget): boolean {
  const group = GROUPS[pattern];
  if (group) return group(t.role);
  const re = globRegExp(pattern);
  return re.test(t.role) || re.test(t.canonical) || re.test(t.canonical.replace(/\.weight$/, ""));
}

/** The encoding the policy gives `t` (plain when no rule matches). */
export function quantFor(policy: QuantPolicy, t: WeightTarget): WeightQuant {
  let q = NO_QUANT;
  for (const r of policy.rules) if (patternMatches(r.pattern, t)) q = r.quant;
  return q;
}

/**
 * Parses the short spelling of one encoding: `none` (also `fp16`, `fp32`: plain), `lut<bits>`,
 * `lut<bits>,<group>`, `lut<bits>,per-tensor`, `int8`, `int8,<block>` (e.g. "lut4", "lut6,16").
 */
export function parseWeightQuant(text: string, field = "quant"): WeightQuant {
  const s = text.trim().toLowerCase();
  if (s === "none" || s === "fp16" || s === "fp32") return NO_QUANT;
  const m = /^lut(\d+)(?:,(\d+|per-tensor))?$/.exec(s);
  if (m) {
    const bits = Number(m[1]);
    if (![2, 4, 6, 8].includes(bits))
      throw new GraphOptionError(field, `LUT bits must be 2, 4, 6 or 8, got "${text}"`);
    if (m[2] === "per-tensor") return { kind: "lut", bits: bits as LutBits, perTensor: true };
    if (m[2] !== undefined) {
      const g = Number(m[2]);
      if (g < 1)
        throw new GraphOptionError(field, `LUT group size must be a positive integer, got "${text}"`);
      return { kind: "lut", bits: bits as LutBits, groupSize: g };
    }
    return { kind: "lut", bits: bits as LutBits };
  }
  const i8 = /^int8(?:,(\d+))?$/.exec(s);
  if (i8) {
    if (i8[1] === undefined) return { kind: "int8" };
    const block = Number(i8[1]);
    if (block < 1)
      throw new GraphOptionError(field, `int8 block size must be a positive integer, got "${text}"`);
    return { kind: "int8", blockSize: block };
  }
  throw new GraphOptionError(
    field,
    `expected none, fp16, lut<2|4|6|8>[,<group>|,per-tensor] or int8[,<block>], got "${text}"`,
  );
}

/** The inverse of parseWeightQuant (group size shown only when set). */
export function formatWeightQuant(q: WeightQuant): string {
  if (q.kind === "none") return "none";
  if (q.kind === "int8") return q.blockSize ? `int8,${q.blockSize}` : "int8";
  if (q.perTensor) return `lut${q.bits},per-tensor`;
  return q.groupSize ? `lut${q.bits},${q.groupSize}` : `lut${q.bits}`;
}

/** A parsed policy text: the preset it starts from and the rules written after it. */
export interface QuantSpec {
  readonly preset: string;
  readonly rules: readonly QuantRule[];
}

/** Parses `[preset,]pattern=encoding,…` (see the module comment). */
export function parseQuantSpec(text: string, field = "quant"): QuantSpec {
  const tokens = text
    .split(",")
    .map((t) => t.trim())
    .filter((t) => t !== "");
  let preset = "default";
  if (tokens.length > 0 && !tokens[0].includes("=")) {
    preset = (tokens.shift() as string).toLowerCase();
    if (!QUANT_PRESETS[preset]) {
      throw new GraphOptionError(
        field,
        `unknown preset "${preset}" (presets: ${Object.keys(QUANT_PRESETS).join(", ")}; rules are pattern=encoding)`,
      );
    }
  }
  const rules: { pattern: string; encoding: string }[] = [];
  for (const t of tokens) {
    const eq = t.indexOf("=");
    if (eq < 0) {
      // "lut6,16": the part after the comma continues the previous encoding
      const last = rules.at(-1);
      if (!last) throw new GraphOptionError(field, `"${t}" is neither a preset nor pattern=encoding`);
      last.encoding += `,${t}`;
      continue;
    }
    const pattern = t.slice(0, eq).trim();
    if (pattern === "") throw new GraphOptionError(field, `"${t}": the pattern before "=" is empty`);
    rules.push({ pattern, encoding: t.slice(eq + 1).trim() });
  }
  const parsed = rules.map((r) => {
    try {
      return { pattern: r.pattern, quant: parseWeightQuant(r.encoding, field) };
    } catch (e) {
      throw new GraphOptionError(
        field,
        `rule "${r.pattern}=${r.encoding}": ${(e as GraphOptionError).detail}`,
      );
    }
  });
  return { preset, rules: parsed };
}

/** The rules a spec stands for: its preset's, then its own. */
export function specRules(spec: QuantSpec): QuantRule[] {
  return [...(QUANT_PRESETS[spec.preset] ?? []), ...spec.rules];
}

/** The text form of a spec (parseQuantSpec's inverse, normalised). */
export function formatQuantSpec(spec: QuantSpec): string {
  return [spec.preset, ...spec.rules.map((r) => `${r.pattern}=${formatWeightQuant(r.quant)}`)].join(",");
}

/** Patterns of `policy` that select none of `targets` (a typo, or a tensor this model lacks). */
export function unmatchedPatterns(policy: QuantPolicy, targets: readonly WeightTarget[]): string[] {
  return [...new Set(policy.rules.map((r) => r.pattern))].filter(
    (p) => !targets.some((t) => patternMatches(p, t)),
  );
}

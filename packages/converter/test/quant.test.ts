/** The quantization policy: its text form, presets, pattern matching and the default's encodings. */
import { parseQwen35Config, qwen35Parameters } from "@anemll-qwen35/ir/checkpoint";
import { publishedConfigJson } from "@anemll-qwen35/testkit";
import { describe, expect, it } from "vitest";
import { ConvertOptionError, GraphOptionError } from "../src/errors.js";
import { resolveQuantSpec } from "../src/options.js";
import { bytesFor, describePlan, formatEncoding, planQuant, quantizationRecord } from "../src/quant/plan.js";
import {
  DEFAULT_QUANT_RULES,
  formatQuantSpec,
  formatWeightQuant,
  parseQuantSpec,
  patternMatches,
  QUANT_PRESETS,
  quantFor,
  specRules,
  unmatchedPatterns,
  type WeightTarget,
} from "../src/quant/policy.js";

const cfg = parseQwen35Config(publishedConfigJson("0.8b"));
const targets: WeightTarget[] = [
  ...qwen35Parameters(cfg, { tied: true }).filter((p) => p.kind === "projection" || p.kind === "embedding"),
  { canonical: "lm_head", role: "lm_head" },
];
const t = (canonical: string): WeightTarget => targets.find((x) => x.canonical === canonical) as WeightTarget;
const enc = (rules: Parameters<typeof quantFor>[0]["rules"], canonical: string) =>
  formatWeightQuant(quantFor({ rules }, t(canonical)));

describe("quantization policy", () => {
  it("the default: every projection LUT6 but GDN in_proj_a/b (plain), lm_head LUT6, embedding plain", () => {
    expect(describePlan(planQuant(cfg, { rules: DEFAULT_QUANT_RULES }))).toEqual({
      embed: "none",
      "gdn.in_proj_qkv": "lut6,8",
      "gdn.in_proj_z": "lut6,8",
      "gdn.in_proj_b": "none",
      "gdn.in_proj_a": "none",
      "gdn.out_proj": "lut6,8",
      "attn.q_proj": "lut6,8",
      "attn.k_proj": "lut6,8",
      "attn.v_proj": "lut6,8",
      "attn.o_proj": "lut6,8",
      "mlp.gate_proj": "lut6,8",
      "mlp.up_proj": "lut6,8",
      "mlp.down_proj": "lut6,8",
      lm_head: "lut6,8",
    });
  });

  it("the preset mixed (the hot-path issue's proposal): GDN in_proj_a/b plain, in_proj_qkv/out_proj LUT6, MLP/attention/z LUT4, lm_head LUT6", () => {
    const r = QUANT_PRESETS.mixed;
    expect(enc(r, "layers.0.linear_attn.in_proj_a.weight")).toBe("none");
    expect(enc(r, "layers.0.linear_attn.in_proj_b.weight")).toBe("none");
    expect(enc(r, "layers.0.linear_attn.in_proj_qkv.weight")).toBe("lut6");
    expect(enc(r, "layers.1.linear_attn.out_proj.weight")).toBe("lut6");
    expect(enc(r, "layers.2.linear_attn.in_proj_z.weight")).toBe("lut4");
    for (const n of ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"])
      expect(enc(r, `layers.3.${n}.weight`), n).toBe("lut4");
    for (const n of ["gate_proj", "up_proj", "down_proj"])
      expect(enc(r, `layers.7.mlp.${n}.weight`), n).toBe("lut4");
    expect(enc(r, "lm_head")).toBe("lut6");
    expect(enc(r, "embed")).toBe("none");
  });

  it("text form: a preset then pattern=encoding rules, the last match winning; commas continue an encoding", () => {
    const spec = parseQuantSpec(
      "lut4, gdn.in_proj_qkv=lut6,16 ,gdn.in_proj_a=fp16,layers.*.mlp.down_proj=lut8,per-tensor",
    );
    expect(spec.preset).toBe("lut4");
    expect(formatQuantSpec(spec)).toBe(
      "lut4,gdn.in_proj_qkv=lut6,16,gdn.in_proj_a=none,layers.*.mlp.down_proj=lut8,per-tensor",
    );
    const rules = specRules(spec);
    expect(enc(rules, "layers.0.linear_attn.in_proj_qkv.weight")).toBe("lut6,16");
    expect(enc(rules, "layers.0.linear_attn.in_proj_a.weight")).toBe("none");
    expect(enc(rules, "layers.0.linear_attn.in_proj_b.weight")).toBe("lut4"); // the preset's body rule
    expect(enc(rules, "layers.5.mlp.down_proj.weight")).toBe("lut8,per-tensor");
    expect(enc(rules, "lm_head")).toBe("lut6");
    // no preset named: "default"; a later general rule overrides an earlier specific one
    const later = specRules(parseQuantSpec("gdn.in_proj_a=lut8,body=lut6"));
    expect(enc(later, "layers.0.linear_attn.in_proj_a.weight")).toBe("lut6");
    expect(parseQuantSpec("").preset).toBe("default");
  });

  it("patterns: groups, role globs, canonical names with or without .weight", () => {
    const qkv = t("layers.4.linear_attn.in_proj_qkv.weight");
    for (const p of [
      "body",
      "gdn",
      "*",
      "gdn.*",
      "gdn.in_proj_?kv",
      "layers.4.*",
      "layers.4.linear_attn.in_proj_qkv",
    ])
      expect(patternMatches(p, qkv), p).toBe(true);
    for (const p of ["attn", "mlp", "lm_head", "embed", "layers.5.*", "layers.4.linear_attn.in_proj_z"])
      expect(patternMatches(p, qkv), p).toBe(false);
    expect(patternMatches("head", t("lm_head"))).toBe(true);
    expect(patternMatches("body", t("lm_head"))).toBe(false);
    expect(patternMatches("body", t("embed"))).toBe(false);
  });

  it("a role whose tensors differ is recorded tensor by tensor", () => {
    const rules = specRules(parseQuantSpec("lut4,layers.3.*=lut8"));
    const d = describePlan(planQuant(cfg, { rules }));
    // layer 3 is the first attention layer: its tensors are LUT8, the other attention layers' LUT4
    expect(d["attn.q_proj"]).toBeUndefined();
    expect(d["layers.3.self_attn.q_proj.weight"]).toBe("lut8,8");
    expect(d["layers.7.self_attn.q_proj.weight"]).toBe("lut4,8");
    expect(d["layers.3.mlp.down_proj.weight"]).toBe("lut8,8");
    expect(d["layers.0.mlp.down_proj.weight"]).toBe("lut4,8");
    expect(d["gdn.in_proj_qkv"]).toBe("lut4,8"); // no GDN tensor in layer 3: still one entry
    expect(Object.keys(d).filter((k) => k.startsWith("layers.")).length).toBe(4 * 6 + 3 * 24); // 4 attention roles × 6 layers, 3 MLP roles × 24
  });

  it("rejects unknown presets, bad encodings and empty patterns naming the rule; finds patterns that match nothing", () => {
    expect(() => parseQuantSpec("lut5")).toThrow(GraphOptionError);
    expect(() => parseQuantSpec("lut5")).toThrow(/unknown preset "lut5"/);
    expect(() => parseQuantSpec("gdn.in_proj_a=lut3")).toThrow(/quant: rule "gdn\.in_proj_a=lut3": LUT bits/);
    expect(() => parseQuantSpec("=lut4")).toThrow(/pattern before "=" is empty/);
    expect(() => parseQuantSpec("default,16")).toThrow(/neither a preset nor pattern=encoding/);
    expect(() => resolveQuantSpec({ quant: "body=int3" })).toThrow(ConvertOptionError);
    expect(
      unmatchedPatterns(
        { rules: parseQuantSpec("gdn.in_proj_qvk=lut6,layers.99.*=lut8,mlp=lut6").rules },
        targets,
      ),
    ).toEqual(["gdn.in_proj_qvk", "layers.99.*"]);
  });

  it("the shorthands body/lmHead/embed come after the preset and before the written rules", () => {
    const spec = resolveQuantSpec({
      quant: "default,gdn.in_proj_a=lut8",
      body: { kind: "lut", bits: 6 },
      lmHead: { kind: "int8" },
    });
    expect(formatQuantSpec(spec)).toBe("default,body=lut6,lm_head=int8,gdn.in_proj_a=lut8");
    const rules = specRules(spec);
    expect(enc(rules, "layers.0.linear_attn.in_proj_b.weight")).toBe("lut6"); // body=lut6 overrides the preset's fp16
    expect(enc(rules, "layers.0.linear_attn.in_proj_a.weight")).toBe("lut8");
    expect(enc(rules, "lm_head")).toBe("int8");
  });

  it("the plan resolves every tensor once: the rule's group size, else the policy's, else 8; sizes as stored", () => {
    const rules = specRules(
      parseQuantSpec("lut4,attn.q_proj=lut6,32,mlp.down_proj=lut8,per-tensor,gdn.out_proj=int8,64"),
    );
    const plan = planQuant(cfg, { rules, groupSize: 16 });
    const of = (canonical: string) => plan.tensor(canonical);
    expect(of("layers.3.self_attn.q_proj.weight").encoding).toEqual({
      kind: "lut",
      bits: 6,
      groupSize: 32,
      perTensor: false,
    });
    expect(of("layers.3.self_attn.k_proj.weight").encoding).toEqual({
      kind: "lut",
      bits: 4,
      groupSize: 16,
      perTensor: false,
    });
    expect(formatEncoding(of("layers.0.mlp.down_proj.weight").encoding)).toBe("lut8,per-tensor");
    expect(formatEncoding(of("layers.0.linear_attn.out_proj.weight").encoding)).toBe("int8,64");
    // rules reach only projections, the embedding and the head: a norm stays plain under "*"
    const all = planQuant(cfg, { rules: [{ pattern: "*", quant: { kind: "lut", bits: 4 } }] });
    expect(all.tensor("layers.0.input_layernorm.weight").encoding).toEqual({ kind: "none" });
    expect(all.tensor("embed").encoding.kind).toBe("lut");
    expect(planQuant(cfg, { rules: [] }).tensor("lm_head").encoding).toEqual({ kind: "none" });
    // LUT6 g32: 6 bits a weight plus one 64-entry fp16 LUT per 32 rows; a plain norm: 2 bytes a weight
    const [rows, cols] = of("layers.3.self_attn.q_proj.weight").shape;
    expect(of("layers.3.self_attn.q_proj.weight").bytes).toBe((rows * cols * 6) / 8 + (rows / 32) * 64 * 2);
    expect(of("layers.3.input_layernorm.weight").bytes).toBe(2 * cfg.hiddenSize);
    expect(bytesFor(1024, { kind: "int8", blockSize: 64 }, 4)).toBe(1024 + 16 * 2);
    expect(() => plan.tensor("layers.99.mlp.up_proj.weight")).toThrow(/not a tensor/);
  });

  it("model.json's record: the rules' own spellings in the summaries, resolved group sizes per role", () => {
    const spec = parseQuantSpec("default,lm_head=lut4,attn=lut8,16");
    const r = quantizationRecord(planQuant(cfg, { rules: specRules(spec) }), spec);
    expect(r).toMatchObject({
      body: "mixed",
      lmHead: "lut4",
      embed: "none",
      groupSize: 8,
      policy: "default,lm_head=lut4,attn=lut8,16",
    });
    expect(r.encodings).toMatchObject({
      lm_head: "lut4,8",
      "attn.q_proj": "lut8,16",
      "gdn.in_proj_a": "none",
      embed: "none",
    });
  });
});

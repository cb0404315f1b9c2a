import { readFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  parameterCounts,
  parseQwen35Config,
  readQwen35Config,
  usesTiedEmbeddings,
} from "../../src/checkpoint/index.js";
import { tempDir, tinyConfigJson } from "./helpers.js";

const DATA = fileURLToPath(new URL("./data/", import.meta.url));
const load = (file: string) => JSON.parse(readFileSync(join(DATA, file), "utf8")) as Record<string, unknown>;

/**
 * Expected values per published size (reference §1). Parameter counts were worked out by hand
 * from the tensor shapes in reference §3.2 (embedding V*D; GDN layer = in_proj_qkv + z + a + b +
 * conv + dt_bias + A_log + norm + out_proj; attention layer = q(2x) + k + v + o + q/k norms;
 * plus MLP and two layer norms).
 */
const SIZES = [
  {
    file: "qwen3.5-0.8b.config.json",
    layout: "vl",
    D: 1024,
    L: 24,
    H: 8,
    Hkv: 2,
    Hv: 16,
    F: 3584,
    tied: true,
    convDim: 6144,
    valueDim: 2048,
    r: 1,
    gqa: 4,
    embedding: 254_279_680,
    gdnLayer: 21_555_360,
    attnLayer: 18_352_640,
    total: 752_393_024,
  },
  {
    file: "qwen3.5-2b.config.json",
    layout: "vl",
    D: 2048,
    L: 24,
    H: 8,
    Hkv: 2,
    Hv: 16,
    F: 6144,
    tied: true,
    convDim: 6144,
    valueDim: 2048,
    r: 1,
    gqa: 4,
    embedding: 508_559_360,
    gdnLayer: 58_814_624,
    attnLayer: 52_433_408,
    total: 1_881_825_088,
  },
  {
    file: "qwen3.5-4b.text-config.json",
    layout: "text",
    D: 2560,
    L: 32,
    H: 16,
    Hkv: 4,
    Hv: 32,
    F: 9216,
    tied: true,
    convDim: 8192,
    valueDim: 4096,
    r: 2,
    gqa: 4,
    embedding: 635_699_200,
    gdnLayer: 112_923_840,
    attnLayer: 107_484_672,
    total: 4_205_751_296,
  },
  {
    file: "qwen3.5-9b.config.json",
    layout: "vl",
    D: 4096,
    L: 32,
    H: 16,
    Hkv: 4,
    Hv: 32,
    F: 12288,
    tied: false,
    convDim: 8192,
    valueDim: 4096,
    r: 2,
    gqa: 4,
    embedding: 1_017_118_720,
    gdnLayer: 218_407_104,
    attnLayer: 209_723_904,
    total: 8_953_803_264,
  },
  {
    file: "qwen3.5-35b-a3b.config.json",
    layout: "vl",
    D: 2048,
    L: 40,
    H: 16,
    Hkv: 2,
    Hv: 32,
    F: undefined,
    tied: false,
    convDim: 8192,
    valueDim: 4096,
    r: 2,
    gqa: 8,
    embedding: 508_559_360,
    gdnLayer: 842_700_992,
    attnLayer: 836_246_016,
    total: 34_660_610_688,
  },
] as const;

describe("published configs", () => {
  for (const s of SIZES) {
    it(`${s.file}: fields, derived dimensions, layer plan and parameter counts`, () => {
      const c = parseQwen35Config(load(s.file), s.file);
      expect(c.source).toEqual({ file: s.file, layout: s.layout });
      expect(c.hiddenSize).toBe(s.D);
      expect(c.numHiddenLayers).toBe(s.L);
      expect(c.vocabSize).toBe(248320);
      expect(c.numAttentionHeads).toBe(s.H);
      expect(c.numKeyValueHeads).toBe(s.Hkv);
      expect(c.headDim).toBe(256);
      expect(c.gqaRatio).toBe(s.gqa);
      expect(c.linearNumKeyHeads).toBe(16);
      expect(c.linearNumValueHeads).toBe(s.Hv);
      expect(c.keyDim).toBe(2048);
      expect(c.valueDim).toBe(s.valueDim);
      expect(c.convDim).toBe(s.convDim);
      expect(c.gdnHeadRatio).toBe(s.r);
      expect(c.rotaryDim).toBe(64);
      expect(c.partialRotaryFactor).toBe(0.25);
      expect(c.ropeTheta).toBe(10_000_000);
      expect(c.rmsNormEps).toBe(1e-6);
      expect(c.intermediateSize).toBe(s.F);
      expect(c.tieWordEmbeddings).toBe(s.tied);
      expect(c.eosTokenIds).toEqual([248044]);
      // layer plan: layer i is full attention iff (i + 1) % 4 == 0
      expect(c.layerTypes.length).toBe(s.L);
      expect(c.layerTypes.filter((t) => t === "full_attention").length).toBe(s.L / 4);
      expect(c.layerTypes[3]).toBe("full_attention");
      expect(c.layerTypes[4]).toBe("linear_attention");
      expect(c.superBlocks.length).toBe(s.L / 4);
      expect(c.superBlocks[1]).toEqual({ index: 1, layers: [4, 5, 6, 7] });

      const p = parameterCounts(c);
      expect(p.embedding).toBe(s.embedding);
      expect(p.perLayer[0]).toBe(s.gdnLayer);
      expect(p.perLayer[3]).toBe(s.attnLayer);
      expect(p.lmHead).toBe(s.tied ? 0 : s.embedding);
      expect(p.total).toBe(s.total);
      expect(p.nonEmbedding).toBe(s.total - s.embedding - p.lmHead);
    });
  }

  it("0.8B: about 0.75 B text-model parameters of which 254 M are the embedding", () => {
    const p = parameterCounts(parseQwen35Config(load("qwen3.5-0.8b.config.json")));
    expect(p.total / 1e9).toBeCloseTo(0.75, 2);
    expect(Math.round(p.embedding / 1e6)).toBe(254);
  });

  it("35B-A3B: MoE sizes and about 3 B active parameters per token", () => {
    const c = parseQwen35Config(load("qwen3.5-35b-a3b.config.json"));
    expect(c.modelType).toBe("qwen3_5_moe_text");
    expect(c.moe).toEqual({
      numExperts: 256,
      numExpertsPerTok: 8,
      moeIntermediateSize: 512,
      sharedExpertIntermediateSize: 512,
    });
    const p = parameterCounts(c);
    // routed experts per layer: 256 * 3 * 512 * 2048; active fraction 8/256
    const inactive = 40 * 256 * 3 * 512 * 2048 * (248 / 256);
    expect(p.activePerToken).toBe(p.total - inactive);
    expect(p.activePerToken / 1e9).toBeGreaterThan(2.5);
    expect(p.activePerToken / 1e9).toBeLessThan(3.5);
  });

  it("4B text layout: falls back to full_attention_interval and top-level RoPE fields", () => {
    const raw = load("qwen3.5-4b.text-config.json");
    expect(raw.layer_types).toBeUndefined();
    expect(raw.rope_parameters).toBeUndefined();
    const c = parseQwen35Config(raw);
    expect(c.fullAttentionInterval).toBe(4);
    expect(c.layerTypes.slice(0, 8)).toEqual([
      "linear_attention",
      "linear_attention",
      "linear_attention",
      "full_attention",
      "linear_attention",
      "linear_attention",
      "linear_attention",
      "full_attention",
    ]);
  });

  it("defaults partial_rotary_factor to 0.25 and full_attention_interval to 4", () => {
    const raw = tinyConfigJson({ layout: "text" }) as Record<string, unknown>;
    delete raw.layer_types;
    raw.rope_parameters = { rope_theta: 1000 };
    const c = parseQwen35Config(raw);
    expect(c.partialRotaryFactor).toBe(0.25);
    expect(c.rotaryDim).toBe(2);
    expect(c.ropeTheta).toBe(1000);
    expect(c.layerTypes).toEqual([
      "linear_attention",
      "linear_attention",
      "linear_attention",
      "full_attention",
    ]);
  });
});

describe("tied embeddings", () => {
  const tied = parseQwen35Config(tinyConfigJson({ tied: true }));
  const untied = parseQwen35Config(tinyConfigJson({ tied: false }));
  it("no lm_head.weight means the embedding, whatever the flag", () => {
    expect(usesTiedEmbeddings(untied, ["model.language_model.embed_tokens.weight"])).toBe(true);
    expect(usesTiedEmbeddings(tied, ["model.language_model.embed_tokens.weight"])).toBe(true);
  });
  it("with lm_head.weight present the flag decides", () => {
    expect(usesTiedEmbeddings(untied, ["lm_head.weight"])).toBe(false);
    expect(usesTiedEmbeddings(tied, ["lm_head.weight"])).toBe(true);
  });
  it("the VL wrapper's flag wins over text_config's (as HF's VL class reads it)", () => {
    const raw = tinyConfigJson({ tied: true }) as Record<string, unknown>;
    (raw.text_config as Record<string, unknown>).tie_word_embeddings = false;
    expect(parseQwen35Config(raw).tieWordEmbeddings).toBe(true);
  });
});

describe("config errors", () => {
  const expectConfigError = (json: unknown, field: string, pattern: RegExp, file = "cfg.json") => {
    let err: unknown;
    try {
      parseQwen35Config(json, file);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const e = err as ConfigError;
    expect(e.code).toBe("E_CONFIG");
    expect(e.file).toBe(file);
    expect(e.issues.map((i) => i.field)).toContain(field);
    expect(e.message).toContain(file);
    expect(e.message).toMatch(pattern);
    return e;
  };
  const vl = () => tinyConfigJson() as Record<string, unknown> & { text_config: Record<string, unknown> };

  it("missing field, named with its path", () => {
    const raw = vl();
    delete raw.text_config.hidden_size;
    expectConfigError(
      raw,
      "text_config.hidden_size",
      /field "text_config.hidden_size": expected a positive integer, missing/,
    );
  });

  it("wrong type and out-of-range values", () => {
    const raw = vl();
    raw.text_config.num_attention_heads = "8";
    raw.text_config.rms_norm_eps = -1;
    const e = expectConfigError(
      raw,
      "text_config.num_attention_heads",
      /expected a positive integer, got "8"/,
    );
    expect(e.issues.map((i) => i.field)).toContain("text_config.rms_norm_eps");
    expect(e.message).toMatch(/2 problems/);
  });

  it("sizes no Qwen3.5 could have are refused before anything is allocated for them", () => {
    const raw = vl();
    raw.text_config.num_hidden_layers = 1_000_000;
    expectConfigError(
      raw,
      "text_config.num_hidden_layers",
      /expected a positive integer of at most 1,024, got 1000000/,
    );
    const wide = vl();
    wide.text_config.vocab_size = 2 ** 40;
    expectConfigError(wide, "text_config.vocab_size", /at most 2,097,152/);
  });

  it("EOS ids outside the vocabulary", () => {
    const raw = vl();
    raw.text_config.eos_token_id = [5, raw.text_config.vocab_size as number];
    expectConfigError(raw, "text_config.eos_token_id", /expected ids below vocab_size \(\d+\), got \d+/);
    const wrapped = vl();
    wrapped.eos_token_id = 1 << 20;
    expectConfigError(wrapped, "text_config.eos_token_id", /got 1048576/);
  });

  it("unknown model_type", () => {
    expectConfigError(
      { ...tinyConfigJson({ layout: "text" }), model_type: "qwen3_next" },
      "model_type",
      /"qwen3_5_text" or "qwen3_5_moe_text"/,
    );
    expectConfigError(
      { ...vl(), model_type: "llava" },
      "model_type",
      /expected "qwen3_5" or "qwen3_5_moe", got "llava"/,
    );
  });

  it("text_config model_type disagreeing with the wrapper", () => {
    const raw = vl();
    raw.text_config.model_type = "qwen3_5_moe_text";
    expectConfigError(raw, "text_config.model_type", /expected "qwen3_5_text" to match model_type "qwen3_5"/);
  });

  it("layer_types of the wrong length or with unknown entries", () => {
    const raw = vl();
    raw.text_config.layer_types = ["linear_attention", "full_attention"];
    expectConfigError(raw, "text_config.layer_types", /expected 4 entries \(num_hidden_layers\), got 2/);
    const raw2 = vl();
    (raw2.text_config.layer_types as string[])[0] = "sliding_attention";
    expectConfigError(raw2, "text_config.layer_types.0", /"linear_attention" or "full_attention"/);
  });

  it("a layer plan that is not whole DDDA super-blocks", () => {
    const raw = vl();
    raw.text_config.layer_types = [
      "linear_attention",
      "full_attention",
      "linear_attention",
      "full_attention",
    ];
    expectConfigError(raw, "text_config.layer_types", /whole DDDA super-blocks.*layer 1 is "full_attention"/);
    const six = tinyConfigJson({ layers: 6 });
    expectConfigError(six, "text_config.layer_types", /6 layers is not a multiple of 4/);
    const raw3 = vl();
    delete raw3.text_config.layer_types;
    raw3.text_config.num_hidden_layers = 6;
    expectConfigError(raw3, "text_config.num_hidden_layers", /6 layers is not a multiple of 4/);
  });

  it("head counts that do not divide", () => {
    const raw = vl();
    raw.text_config.num_key_value_heads = 3;
    raw.text_config.linear_num_value_heads = 3;
    const e = expectConfigError(
      raw,
      "text_config.num_key_value_heads",
      /divisor of num_attention_heads \(2\), got 3/,
    );
    expect(e.message).toMatch(/linear_num_value_heads.*multiple of linear_num_key_heads \(2\), got 3/);
  });

  it("rotary dims that are not an even integer, unsupported RoPE scaling, missing rope_theta", () => {
    const raw = vl();
    raw.text_config.rope_parameters = { rope_theta: 1e7, partial_rotary_factor: 0.3 };
    expectConfigError(
      raw,
      "text_config.rope_parameters.partial_rotary_factor",
      /positive even integer, got 2.4/,
    );
    const raw2 = vl();
    raw2.text_config.rope_parameters = { rope_type: "yarn", rope_theta: 1e7 };
    expectConfigError(
      raw2,
      "text_config.rope_parameters.rope_type",
      /"default" \(other RoPE scalings are not supported\)/,
    );
    const raw3 = vl();
    raw3.text_config.rope_parameters = {};
    expectConfigError(raw3, "text_config.rope_parameters.rope_theta", /missing/);
  });

  it("dense without intermediate_size; MoE without expert sizes", () => {
    const raw = vl();
    delete raw.text_config.intermediate_size;
    expectConfigError(raw, "text_config.intermediate_size", /dense FFN width/);
    const moe = tinyConfigJson({ moe: true }) as Record<string, unknown> & {
      text_config: Record<string, unknown>;
    };
    delete moe.text_config.num_experts;
    delete moe.text_config.shared_expert_intermediate_size;
    const e = expectConfigError(moe, "text_config.num_experts", /required for MoE models/);
    expect(e.issues.map((i) => i.field)).toContain("text_config.shared_expert_intermediate_size");
  });

  it("features Qwen3.5 does not have: attention bias, other activations", () => {
    const raw = vl();
    raw.text_config.attention_bias = true;
    raw.text_config.hidden_act = "gelu";
    const e = expectConfigError(
      raw,
      "text_config.attention_bias",
      /false \(Qwen3.5 has no attention biases\)/,
    );
    expect(e.issues.map((i) => i.field)).toContain("text_config.hidden_act");
  });

  it("readQwen35Config names the file for unreadable and non-JSON files", async () => {
    const dir = await tempDir();
    const path = join(dir, "config.json");
    await expect(readQwen35Config(path)).rejects.toThrow(ConfigError);
    await writeFile(path, "{ nope");
    const err = (await readQwen35Config(path).catch((e) => e)) as ConfigError;
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.file).toBe(path);
    expect(err.message).toMatch(/not valid JSON/);
    await writeFile(path, JSON.stringify(tinyConfigJson()));
    expect((await readQwen35Config(path)).source.file).toBe(path);
  });
});

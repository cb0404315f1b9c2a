/**
 * What "smoke" and "full" mean for each scenario. Smoke runs the tiny fixture for a few tokens at
 * ctx 128 so that every scenario finishes in seconds on two cores (the tests use it); full runs
 * the synthetic 0.8B (real shapes, random weights) with bounded token counts, because the
 * reference interpreter decodes 0.8B at about one token per second.
 */
import {
  fixtureDir,
  fixtureModel,
  type ModelSpec,
  scaledSyntheticModel,
  syntheticModel,
  userModel,
} from "./models.js";
import type { Scale } from "./schema.js";

/** How the MLX side of the pairing loads its weights. */
export type MlxVariant = "4bit" | "8bit" | "bf16";
export const MLX_VARIANTS: readonly MlxVariant[] = ["4bit", "8bit", "bf16"];

/** The agent scenario's conversation (scenarios/agent.ts). */
export interface AgentScript {
  readonly turns: number;
  readonly toolResultTokens: number;
  readonly maxTokens: number;
  /** The tools offered (the first `tools` of AGENT_TOOLS). */
  readonly tools: number;
}

export interface AgentModel {
  readonly spec: ModelSpec;
  /** Tokenizer folder for `serve --tokenizer` (synthetic checkpoints have none). */
  readonly tokenizer?: string;
  readonly script: AgentScript;
  /** MLX load quantization (as the other scenarios: 4-bit for the 0.8B). */
  readonly mlxBits?: 4 | 8;
}

export interface AgentParams {
  readonly ctx: number;
  readonly models: readonly AgentModel[];
  /** Models projected on the ANE: a name and a one-super-block (or whole) checkpoint, × superBlocks. */
  readonly projections: readonly {
    readonly name: string;
    readonly spec: ModelSpec;
    readonly superBlocks?: number;
  }[];
  readonly body: string;
  readonly lmHead: string;
  /** A `costplan calibrate` file for the projections (default: costplan's fit). */
  readonly calibration?: string;
  /** The script the projections cost (its token counts built from the first chain run). */
  readonly projectScript: AgentScript;
}

export interface ScaleParams {
  readonly scale: Scale;
  readonly model: ModelSpec;
  /** A second, different model with the same tokenizer (speculative: an unrelated draft). */
  readonly otherModel?: ModelSpec;
  /** Context of the decode / prefill / fusion conversions. */
  readonly ctx: number;
  readonly body: string;
  readonly lmHead: string;
  readonly promptTokens: number;
  readonly decodeSteps: number;
  /** Decode steps run and discarded before the measured ones. */
  readonly warmupSteps: number;
  /** Prompt lengths of the prefill scenario (its chain is converted for the longest, at least ctx). */
  readonly prefillPrompts: readonly number[];
  readonly prefillRepeats: number;
  readonly ctxSweep: readonly number[];
  readonly fuseSweep: readonly (number | "all")[];
  /** MLX model load: float32 for the fixtures (parity dtype), 4-bit for 0.8B (as the reference study). */
  readonly mlx: { readonly dtype?: "float32" | "bfloat16"; readonly bits?: 4 | 8 };
  readonly parallelSeconds: number;
  readonly handoff: { readonly hidden: number; readonly ks: readonly number[]; readonly steps: number };
  readonly speculative: { readonly tokens: number; readonly gammas: readonly number[] };
  /** Experiment B: the first N layers on MLX, the rest on the ANE chain (fuse 1). */
  readonly split: {
    readonly body: string;
    readonly lmHead: string;
    readonly mlx: { readonly bits?: 4 | 8; readonly dtype?: "float32" | "bfloat16" };
  };
  /** The pairing: an MLX MoE in the foreground, the small ANE chain in the background. */
  readonly pairing: {
    readonly foreground: ModelSpec;
    readonly background: ModelSpec;
    readonly seconds: number;
    readonly variants: readonly MlxVariant[];
  };
  /** The agent conversation: models served, its script, the ANE projections. */
  readonly agent: AgentParams;
}

export interface ScaleOverrides {
  /** A checkpoint folder or hf: reference replacing the scale's model. */
  readonly model?: string;
  /** Decode steps replacing the scale's. */
  readonly tokens?: number;
  /** Seconds per parallel / pairing window replacing the scale's. */
  readonly seconds?: number;
  /** The agent scenario's conversion ctx (default 4096, capped by a model's max positions). */
  readonly ctx?: number;
  /** A `costplan calibrate` file for the agent scenario's projections (default: costplan's fit). */
  readonly calibration?: string;
}

/** The agent's script: 8 tools, 4 turns of 300-token tool results (reduced at smoke scale). */
const AGENT_FULL = { turns: 4, toolResultTokens: 300, maxTokens: 16, tools: 8 } as const;
const SMOKE = { turns: 3, toolResultTokens: 24, maxTokens: 3, tools: 2 } as const;

function agentParams(scale: Scale, ctx: number | undefined): AgentParams {
  const trained = fixtureModel("tiny-trained");
  if (scale === "smoke")
    return {
      ctx: ctx ?? 1024,
      body: "lut4",
      lmHead: "lut4",
      models: [{ spec: trained, script: SMOKE }],
      projectScript: SMOKE,
      projections: [{ name: "tiny-trained", spec: trained }],
    };
  // the synthetic checkpoints have no tokenizer: tiny-trained's serves them (only token counts matter)
  const tokenizer = fixtureDir("tiny-trained");
  return {
    ctx: ctx ?? 4096,
    body: "lut4",
    lmHead: "lut4",
    models: [
      { spec: trained, script: AGENT_FULL },
      // the interpreter runs the 0.8B at about a token a second on two quiet cores (far slower on a
      // shared machine): 2 tools, 2 turns of 64-token results, 2 tokens a reply
      {
        spec: syntheticModel("0.8b"),
        tokenizer,
        script: { turns: 2, toolResultTokens: 64, maxTokens: 2, tools: 2 },
        mlxBits: 4,
      },
    ],
    projectScript: AGENT_FULL,
    projections: [
      { name: "0.8b", spec: syntheticModel("0.8b") },
      { name: "9b", spec: scaledSyntheticModel("9b", { layers: 4 }), superBlocks: 8 },
    ],
  };
}

export function scaleParams(scale: Scale, o: ScaleOverrides = {}): ScaleParams {
  const base: Omit<ScaleParams, "agent"> =
    scale === "smoke"
      ? {
          scale,
          model: fixtureModel("tiny-tied"),
          otherModel: fixtureModel("tiny-gqa"),
          ctx: 128,
          body: "lut4",
          lmHead: "lut4",
          promptTokens: 4,
          decodeSteps: 3,
          warmupSteps: 1,
          // one prefill-function call (T = 64): below T/8 a chain would not batch at all
          prefillPrompts: [64],
          prefillRepeats: 2,
          ctxSweep: [128, 256],
          fuseSweep: [1, "all"],
          mlx: { dtype: "float32" },
          parallelSeconds: 0.5,
          handoff: { hidden: 64, ks: [1, 2, 4], steps: 6 },
          speculative: { tokens: 6, gammas: [2, 4] },
          // unquantized on both sides, so that the split's tokens can be checked against each runtime's
          split: { body: "none", lmHead: "none", mlx: { dtype: "float32" } },
          pairing: {
            foreground: fixtureModel("tiny-moe"),
            background: fixtureModel("tiny-tied"),
            seconds: 0.5,
            variants: MLX_VARIANTS,
          },
        }
      : {
          scale,
          model: syntheticModel("0.8b"),
          ctx: 256,
          body: "lut4",
          // the reference study's fully fused 0.8B used a LUT4 head (LUT6 fell into repetition loops)
          lmHead: "lut4",
          promptTokens: 8,
          decodeSteps: 8,
          warmupSteps: 1,
          prefillPrompts: [64, 256, 1024],
          prefillRepeats: 2,
          ctxSweep: [128, 256, 512, 1024],
          fuseSweep: [1, 2, 3, "all"],
          // as the reference study's MLX baseline: 4-bit (affine, group 64, quantized at load)
          mlx: { bits: 4 },
          parallelSeconds: 20,
          handoff: { hidden: 1024, ks: [1, 2, 4, 8, 16], steps: 40 },
          speculative: { tokens: 12, gammas: [2, 4] },
          // the study's encodings: LUT4 chain, 4-bit MLX
          split: { body: "lut4", lmHead: "lut4", mlx: { bits: 4 } },
          // 35B-A3B's hidden size, heads, expert width, top-8 and vocabulary; 8 of its 40 layers
          // and 32 of its 256 experts (≈ 4 GB in bf16) so that it fits the build machine
          pairing: {
            foreground: scaledSyntheticModel("35b-a3b", { layers: 8, experts: 32 }),
            background: syntheticModel("0.8b"),
            seconds: 10,
            variants: MLX_VARIANTS,
          },
        };
  // --model names the pairing's foreground too (e.g. the real 35B-A3B on a Mac)
  const pairing = {
    ...base.pairing,
    ...(o.model ? { foreground: userModel(o.model) } : {}),
    ...(o.seconds ? { seconds: o.seconds } : {}),
  };
  return {
    ...base,
    ...(o.model ? { model: userModel(o.model), otherModel: undefined } : {}),
    ...(o.tokens ? { decodeSteps: o.tokens } : {}),
    ...(o.seconds ? { parallelSeconds: o.seconds } : {}),
    pairing,
    agent: { ...agentParams(scale, o.ctx), calibration: o.calibration },
  };
}

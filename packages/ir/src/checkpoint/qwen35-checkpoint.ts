/**
 * A Qwen3.5 checkpoint directory opened as one object: config + weight map + lazy tensors,
 * addressed by canonical names (see weights.ts).
 */
import { join } from "node:path";
import {
  type DType,
  firstNonFinite,
  storageFromBytes,
  type Tensor,
  tensor,
  tensorToFloat32,
} from "@anemll-qwen35/core";
import { type Qwen35Config, readQwen35Config } from "./config.js";
import type { SafetensorsTensorInfo } from "./safetensors.js";
import { SafetensorsCheckpoint } from "./sharded.js";
import {
  assertWeights,
  checkWeights,
  hfName,
  WeightError,
  type WeightMap,
  type WeightReport,
} from "./weights.js";

export interface Qwen35CheckpointOpenOptions {
  /** Check every expected tensor's presence, shape and dtype on open (default true). */
  validate?: boolean;
}

const FUSED_EXPERTS = /^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$/;

export class Qwen35Checkpoint implements AsyncDisposable {
  readonly weightMap: WeightMap;
  /** True when the LM head is the embedding (no lm_head.weight, or the config ties them). */
  readonly tiedEmbeddings: boolean;

  private constructor(
    readonly dir: string,
    readonly config: Qwen35Config,
    readonly tensors: SafetensorsCheckpoint,
    /** The validation report (computed on open even when validate is false). */
    readonly report: WeightReport,
  ) {
    this.weightMap = report.map;
    this.tiedEmbeddings = report.tied;
  }

  /** Opens `dir` (config.json + safetensors); throws ConfigError / SafetensorsError / WeightError. */
  static async open(dir: string, options: Qwen35CheckpointOpenOptions = {}): Promise<Qwen35Checkpoint> {
    const config = await readQwen35Config(join(dir, "config.json"));
    const tensors = await SafetensorsCheckpoint.open(dir);
    try {
      const report = checkWeights(config, tensors, dir);
      if (options.validate ?? true) assertWeights(report, dir);
      return new Qwen35Checkpoint(dir, config, tensors, report);
    } catch (err) {
      await tensors.close();
      throw err;
    }
  }

  /** Canonical names present in the checkpoint (plus "lm_head" when tied), sorted. */
  names(): string[] {
    const names = [...this.weightMap.toHf.keys()];
    if (this.tiedEmbeddings && !names.includes("lm_head")) names.push("lm_head");
    return names.sort();
  }

  has(canonical: string): boolean {
    return this.resolve(canonical) !== undefined || this.stackedParts(canonical) !== undefined;
  }

  /** The HF tensor name behind a canonical name (lm_head → the embedding when tied). */
  hfNameOf(canonical: string): string {
    const hf = this.resolve(canonical);
    if (hf === undefined) throw this.missing(canonical);
    return hf;
  }

  /** Stored dtype, shape and location of a canonical tensor. */
  info(canonical: string): SafetensorsTensorInfo {
    return this.tensors.info(this.hfNameOf(canonical));
  }

  /**
   * The tensor as stored (bf16 stays bf16); WeightError when it holds a NaN or Inf. `lm_head`
   * returns the embedding when tied. A fused
   * expert tensor (`layers.{i}.mlp.experts.gate_up_proj` [E, 2F, D] / `down_proj` [E, D, F])
   * is assembled from per-expert 2-D tensors when the checkpoint stores them that way.
   */
  async get(canonical: string): Promise<Tensor> {
    const hf = this.resolve(canonical);
    const parts = hf === undefined ? this.stackedParts(canonical) : undefined;
    if (hf === undefined && !parts) throw this.missing(canonical);
    const t =
      hf !== undefined ? await this.tensors.read(hf) : await this.stack(canonical, parts as string[][]);
    // a NaN or Inf weight poisons every output it touches: refuse it by name
    const bad = firstNonFinite(t.dtype, t.data);
    if (bad >= 0) {
      const value = tensorToFloat32(tensor(t.dtype, [1], t.data.subarray(bad, bad + 1) as never))[0];
      throw new WeightError({
        file: this.dir,
        tensor: hf ?? canonical,
        actual: String(value),
        message: `"${hf ?? canonical}" holds ${value} (element ${bad} of [${t.shape.join(", ")}]); a checkpoint's weights must be finite`,
      });
    }
    return t;
  }

  /** The tensor converted to fp32 (exact for bf16/f16). */
  async getFloat32(canonical: string): Promise<Tensor<"f32">> {
    const t = await this.get(canonical);
    return t.dtype === "f32" ? (t as Tensor<"f32">) : tensor("f32", t.shape, tensorToFloat32(t));
  }

  async close(): Promise<void> {
    await this.tensors.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private resolve(canonical: string): string | undefined {
    if (canonical === "lm_head" && this.tiedEmbeddings) return this.weightMap.toHf.get("embed");
    // the MTP head's tensors keep their checkpoint names (qwen35MtpParameters)
    if (canonical.startsWith("mtp.") && this.tensors.has(canonical)) return canonical;
    return this.weightMap.toHf.get(canonical);
  }

  /** For a fused expert name on a per-expert checkpoint: the HF names to stack, per expert. */
  private stackedParts(canonical: string): string[][] | undefined {
    const m = FUSED_EXPERTS.exec(canonical);
    if (!m || !this.config.moe) return undefined;
    const layer = m[1];
    const kinds = m[2] === "gate_up_proj" ? ["gate_proj", "up_proj"] : ["down_proj"];
    const parts: string[][] = [];
    for (let e = 0; e < this.config.moe.numExperts; e++) {
      const row: string[] = [];
      for (const k of kinds) {
        const hf = this.weightMap.toHf.get(`layers.${layer}.mlp.experts.${e}.${k}.weight`);
        if (hf === undefined) return undefined;
        row.push(hf);
      }
      parts.push(row);
    }
    return parts;
  }

  private async stack(canonical: string, parts: string[][]): Promise<Tensor> {
    const first = this.tensors.info(parts[0][0]);
    const dtype: DType = first.dtype;
    const [rows, cols] = first.shape;
    const perPart = first.byteLength;
    const out = new Uint8Array(parts.length * parts[0].length * perPart);
    let offset = 0;
    for (const row of parts) {
      for (const hf of row) {
        const info = this.tensors.info(hf);
        if (info.dtype !== dtype || info.byteLength !== perPart) {
          throw new WeightError({
            file: this.dir,
            tensor: hf,
            expected: `${dtype} like ${parts[0][0]}`,
            actual: info.dtype,
            message: `cannot stack "${hf}" into "${canonical}": its dtype/size differ from "${parts[0][0]}"`,
          });
        }
        out.set(await this.tensors.readBytes(hf), offset);
        offset += perPart;
      }
    }
    // gate_up: [E, 2F, D] (gate rows then up rows); down: [E, D, F]
    const shape = [parts.length, rows * parts[0].length, cols];
    return tensor(dtype, shape, storageFromBytes(dtype, out));
  }

  private missing(canonical: string): WeightError {
    return new WeightError({
      file: this.dir,
      tensor: canonical,
      message: `no tensor "${canonical}" (HF name "${hfName(canonical, this.weightMap.layout)}") in this checkpoint`,
    });
  }
}

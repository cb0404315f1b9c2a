/**
 * A deliberately wrong checkpoint: one BF16 tensor of a sharded Hugging Face checkpoint scaled in
 * place, so a conversion of it differs from the original in exactly the package that holds that
 * tensor (what verify --against mlx must find).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Multiplies the BF16 tensor `name` of the checkpoint folder `dir` (with an index) by `factor`. */
export function scaleCheckpointTensor(dir: string, name: string, factor: number): void {
  const index = JSON.parse(readFileSync(join(dir, "model.safetensors.index.json"), "utf8"));
  const shard = index.weight_map[name];
  if (!shard) throw new Error(`${dir} has no tensor ${name}`);
  const file = join(dir, shard);
  const bytes = readFileSync(file);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const info = JSON.parse(bytes.subarray(8, 8 + headerLength).toString("utf8"))[name];
  if (info.dtype !== "BF16") throw new Error(`${name} is ${info.dtype}, not BF16`);
  const [start, end] = info.data_offsets.map((o: number) => 8 + headerLength + o);
  const f32 = new Float32Array(1);
  const bits = new Uint32Array(f32.buffer);
  for (let at = start; at < end; at += 2) {
    bits[0] = bytes.readUInt16LE(at) << 16; // bf16 is the top half of an f32
    f32[0] *= factor;
    bytes.writeUInt16LE(bits[0] >>> 16, at);
  }
  writeFileSync(file, bytes);
}

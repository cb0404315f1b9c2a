/**
 * `@anemll-qwen35/ir/checkpoint`: Hugging Face Qwen3.5 checkpoints — safetensors (lazy, sharded)
 * read and write, config.json → Qwen35Config, the canonical weight names and the parameter table,
 * model references (`hf:owner/name` through the HF cache), golden outputs, atomic file writes,
 * and synthetic checkpoints (random weights with a published size's real shapes).
 */
export { commitDirectory, pathExists, tempSiblingPath, writeFileAtomic } from "./atomic.js";
export * from "./config.js";
export * from "./golden.js";
export * from "./model-ref.js";
export * from "./params.js";
export * from "./qwen35-checkpoint.js";
export {
  SafetensorsError,
  SafetensorsFile,
  type SafetensorsHeader,
  type SafetensorsTensorInfo,
  type TensorSource,
} from "./safetensors.js";
export {
  encodeSafetensorsHeader,
  type NamedTensor,
  type SafetensorsWriteOptions,
  SafetensorsWriter,
  type TensorOrder,
  type TensorSpec,
  writeSafetensors,
} from "./safetensors-writer.js";
export {
  hfShardName,
  INDEX_FILE,
  parseSafetensorsIndex,
  qwenShardName,
  SafetensorsCheckpoint,
  type SafetensorsIndex,
  ShardedSafetensorsWriter,
  type ShardedWriteOptions,
  SINGLE_FILE,
} from "./sharded.js";
export * from "./side-files.js";
// synthetic checkpoints: random-weight stand-ins with the real shapes of each published size
export {
  defaultSyntheticDir,
  planSyntheticCheckpoint,
  publishedConfigJson,
  SYNTHETIC_SIZES,
  SYNTHETIC_STAMP_FILE,
  type SyntheticOptions,
  type SyntheticPlan,
  type SyntheticResult,
  type SyntheticSize,
  scaledConfigJson,
  syntheticTensors,
  writeSyntheticCheckpoint,
} from "./synthetic.js";
export * from "./weights.js";

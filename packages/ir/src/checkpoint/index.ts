/**
 * `@anemll-qwen35/ir/checkpoint`: Hugging Face Qwen3.5 checkpoints — safetensors (lazy, sharded)
 * read and write, config.json → Qwen35Config, the canonical weight names and the parameter table,
 * model references (`hf:owner/name` through the HF cache), golden outputs, atomic file writes,
 * and synthetic checkpoints (random weights with a published size's real shapes).
 */

// A Qwen3.5 checkpoint: config + canonical weight names + lazy reader, validated on open
export { Qwen35Checkpoint, type Qwen35CheckpointOpenOptions } from "./qwen35-checkpoint.js";
export { type CheckpointProgress, TEXT_SIDE_FILES } from "./side-files.js";

// config.json → Qwen35Config (validated, with the derived dims and the layer plan)
export {
  ConfigError,
  type LayerType,
  parseQwen35Config,
  type Qwen35Config,
  type Qwen35MoeConfig,
  type Qwen35TextModelType,
  readQwen35Config,
  type SuperBlock,
  usesTiedEmbeddings,
} from "./config.js";

// The parameter table: every tensor with its shape, kind, role, dtype and quantizability
export {
  type ExpertLayout,
  type ParameterCounts,
  type ParamKind,
  parameterCounts,
  type Qwen35Parameter,
  qwen35ParameterMap,
  qwen35Parameters,
  type Qwen35ParametersOptions,
} from "./params.js";
// The MTP head (mtp.*): its own table, kept out of qwen35Parameters (the text model)
export { mtpLayerCount, qwen35MtpParameters, type Qwen35MtpParametersOptions } from "./params.js";

// Canonical weight names and the checker of a checkpoint's tensors against the table
export {
  assertWeights,
  checkMtpWeights,
  checkWeights,
  hfName,
  type TensorListing,
  type MtpWeightReport,
  WeightError,
  type WeightFindings,
  type WeightReport,
} from "./weights.js";

// safetensors: one file or a sharded folder, read lazily; written streaming and deterministic
export {
  checkSafetensorsShape,
  SafetensorsError,
  SafetensorsFile,
  type SafetensorsHeader,
  type SafetensorsTensorInfo,
  type TensorSource,
} from "./safetensors.js";
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
export {
  type NamedTensor,
  type SafetensorsWriteOptions,
  SafetensorsWriter,
  type TensorOrder,
  type TensorSpec,
  writeSafetensors,
} from "./safetensors-writer.js";

// Model references: a folder, or `hf:owner/name[@revision]` through the Hugging Face cache
export {
  ModelRefError,
  type ResolveOptions,
  type ResolveProgress,
  resolveModelRef,
} from "./model-ref.js";

// Golden outputs (fixtures/…/golden.safetensors) and the comparisons made against them
export { argmax, cosine, GOLDEN_FILE, type Golden, hasGolden, loadGolden, maxAbsDiff } from "./golden.js";

// Atomic writes: a temp name beside the target, then a rename
export { commitDirectory, pathExists, tempSiblingPath, writeFileAtomic } from "./atomic.js";

// Synthetic checkpoints: random-weight stand-ins with the real shapes of each published size
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

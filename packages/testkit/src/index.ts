// the synthetic checkpoint writer is a product of @anemll-qwen35/ir/checkpoint; re-exported here
// for the tests and benchmarks that take all their helpers from the testkit
export {
  defaultSyntheticDir,
  publishedConfigJson,
  type SyntheticSize,
  writeSyntheticCheckpoint,
} from "@anemll-qwen35/ir/checkpoint";
export * from "./configs.js";
export * from "./coremltools.js";
export * from "./corrupt.js";
export * from "./machine.js";
export * from "./random.js";

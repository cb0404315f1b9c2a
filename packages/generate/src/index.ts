export * from "./chat-template.js";
export * from "./constraint.js";
export * from "./errors.js";
export * from "./generator.js";
export {
  applyTokenMask,
  compileConstraint,
  type GrammarSpec,
  type TagFormat,
  type TagItem,
  TokenMatcher,
} from "./grammar-engine.js";
export * from "./json-schema.js";
export * from "./prompt-cache.js";
export * from "./sampler.js";
export * from "./segmenter.js";
export * from "./step-model.js";
export * from "./stop.js";
export * from "./streaming-decoder.js";
export * from "./tokenizer.js";
export * from "./tool-calls.js";

/**
 * @anemll-qwen35/generate: the text loop both runtimes share — tokenizer, chat template, sampler,
 * stop rules and generate() over any StepModel (runtime-ane's ChainRunner, runtime-mlx's MlxQwen35).
 */

// Generating: one call, a Generation that is both an async iterable of chunks and awaitable
export {
  type FinishDetail,
  type FinishReason,
  type GenerateOptions,
  type Generation,
  type GenerationChunk,
  type GenerationResult,
  type GenerationStats,
  generate,
} from "./generator.js";

// Tokenizers: tokenizer.json and its side files, and text decoded as whole characters
export {
  type LoadTokenizerOptions,
  loadTokenizer,
  Tokenizer,
  type TokenizerDefinition,
  type TokenizerFromJsonOptions,
} from "./tokenizer.js";
export { type DecodesIds, StreamingDecoder, type StreamingDecoderOptions } from "./streaming-decoder.js";

// Chat templates: messages and tools rendered by the model's Jinja template
export {
  type ApplyChatTemplateOptions,
  type ChatMessage,
  ChatTemplate,
  type ContentPart,
  type OpenAIToolCall,
  type ToolCall,
  type ToolSpec,
} from "./chat-template.js";

// Sampling and the prompt cache
export { Sampler, type SamplingOptions } from "./sampler.js";
export { PromptCache, type PromptCacheOptions, type PromptCacheStats } from "./prompt-cache.js";

// Constrained decoding (xgrammar's WebAssembly engine): JSON schemas, grammars and strict tool
// calls as token masks on the host, composed with the sampler, stop rules and thinking
export {
  type ConstraintOptions,
  type ConstraintPlan,
  planConstraint,
  prepareConstraint,
  type ToolChoice,
} from "./constraint.js";
export { applyTokenMask, compileConstraint, type GrammarSpec, TokenMatcher } from "./grammar-engine.js";
export { checkJsonSchema, type JsonSchema, SUPPORTED_SCHEMA_KEYWORDS } from "./json-schema.js";

// What a runtime implements: a stateful model stepped token by token, snapshots optional
export {
  canSnapshot,
  type SnapshotModel,
  type StateSnapshot,
  type StepModel,
  type StepOptions,
  type StepOutput,
} from "./step-model.js";
// Speculative decoding with the model's own MTP head (`speculative: "mtp"`): what a runtime implements
export { canSpeculate, type SpeculativeStats, type SpeculativeStepModel } from "./speculative.js";

// The output's parts, for callers that stream it themselves (the server): stop strings, the
// thinking and tool-call markers, tool-call bodies
export { type StopMatch, StopStringMatcher } from "./stop.js";
export { THINK_CLOSE, THINK_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN } from "./segmenter.js";
export { type MalformedToolCall, parseToolCall, type ToolCallParse } from "./tool-calls.js";

// Errors
export {
  ContextOverflowError,
  ModelUnavailableError,
  SnapshotMismatchError,
} from "./step-model.js";
export {
  ChatTemplateError,
  MalformedTokenizerFileError,
  GrammarError,
  MissingTokenizerFileError,
  schemaPlace,
  SpeculativeUnsupportedError,
  UnsupportedSamplingError,
  UnsupportedSchemaError,
} from "./errors.js";

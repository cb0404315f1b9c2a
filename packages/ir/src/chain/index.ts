/**
 * `@anemll-qwen35/ir/chain`: the contract between a converted chain and whoever runs it — model.json,
 * every component input/output/state with its role — the one implementation of the per-token
 * protocol those roles describe, and the plan of the buffers a backend keeps between steps.
 */

// model.json: the chain manifest, read and validated
export {
  CHAIN_FORMAT,
  CHAIN_FORMAT_VERSION,
  CHAIN_MANIFEST_FILE,
  type ChainFunction,
  type ChainManifest,
  type ChainManifestComponent,
  chainBuckets,
  chainFunctions,
  DECODE_FAMILY,
  PREFILL_FAMILY,
  VERIFY_FAMILY,
  ChainManifestError,
  type LmHeadSplit,
  type PrefillFunction,
  parseChainManifest,
  readChainManifest,
} from "./contract.js";

// A component's inputs, outputs and states, each with the role the protocol reads
export type {
  ComponentIO,
  ComponentKind,
  GraphDType,
  IoDType,
  IoRole,
  IoTensor,
  KvPlacement,
  LmHeadPiece,
  MaskRule,
} from "./contract.js";

// The per-token protocol: what each component is fed and what is done with its outputs
export {
  type ChainComponent,
  type ChainPrefill,
  type ChainPrefillResult,
  type ChainStepResult,
  ChainStepper,
  type ChainStepperOptions,
  type HeadOutput,
  hiddenRow,
} from "./protocol.js";
export { MtpHead } from "./mtp-head.js";
export { argmaxToken, ChainProtocolError, decodeMask, MASK_NEG, ringRow } from "./contract.js";
export { type RopeSpec, ropeCosSin } from "./rope.js";

// The buffers a component keeps between steps: the plan read off its roles, and the state holding them
export type { ChainComponentState, ComponentSnapshot } from "./component-state.js";
export {
  type CarriedBuffer,
  HostState,
  type HostSnapshot,
  hostInputs,
  hostOutputs,
  type RowWrittenBuffer,
  rowStatePairs,
  type StatePlan,
  statePlan,
} from "./state.js";

// Integrity: the packages on disk against the digests model.json records
export {
  ChainIntegrityError,
  readVerifiedChain,
  type VerifyChainOptions,
  verifyChainPackages,
} from "./integrity.js";

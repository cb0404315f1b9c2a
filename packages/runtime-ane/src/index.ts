export * from "./backend.js";
export * from "./chain-runner.js";
export * from "./coreml-backend.js";
export * from "./reference-backend.js";
export * from "./transfers.js";

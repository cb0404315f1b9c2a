export * from "./backend.js";
export * from "./chain-runner.js";
export * from "./coreml-backend.js";
export * from "./coreml-native.js";
export * from "./reference-backend.js";

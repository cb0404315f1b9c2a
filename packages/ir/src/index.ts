export * from "./chain.js";
export * from "./checkpoint/index.js";
export * from "./dtype.js";
export * from "./errors.js";
export * from "./mil/format/index.js";
export * from "./mil/index.js";
export * from "./model-ref.js";
export * from "./tensor.js";

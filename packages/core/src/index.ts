export * from "./dtype.js";
export * from "./errors.js";
export * from "./tensor.js";

export * from "./errors.js";
export * from "./dtype.js";
export * from "./tensor.js";
export * from "./mil/program.js";

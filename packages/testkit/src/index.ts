export * from "./configs.js";
export * from "./coremltools.js";
export * from "./machine.js";
export * from "./synthetic.js";

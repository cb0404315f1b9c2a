export * from "./graph/index.js";
export * from "./palettize.js";
export * from "./quantize-int8.js";
export * from "./convert.js";
export * from "./plan.js";

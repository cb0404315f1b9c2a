export * from "./convert.js";
export * from "./graph/index.js";
export { KmeansPool, sharedKmeansPool } from "./kmeans-pool.js";
export * from "./lmhead-split.js";
export * from "./palettize.js";
export * from "./plan.js";
export * from "./quantize-int8.js";
export * from "./strip-vl.js";

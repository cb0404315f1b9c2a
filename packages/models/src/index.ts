export * from "./backend.js";
export * from "./errors.js";
export * from "./generation.js";
export * from "./load.js";
export * from "./load-options.js";
export { runModelRank } from "./mlx.js";

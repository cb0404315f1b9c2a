/**
 * `@anemll-qwen35/ir/chain`: the contract between a converted chain and whoever runs it — model.json,
 * every component input/output/state with its role — the one implementation of the per-token
 * protocol those roles describe, and the plan of the buffers a backend keeps between steps.
 */
export * from "./contract.js";
export * from "./integrity.js";
export * from "./protocol.js";
export * from "./rope.js";
export * from "./state.js";

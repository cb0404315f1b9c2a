/**
 * `@anemll-qwen35/ir/chain`: the contract between a converted chain and whoever runs it — model.json,
 * every component input/output/state with its role — and the one implementation of the per-token
 * protocol those roles describe.
 */
export * from "./contract.js";
export * from "./integrity.js";
export * from "./protocol.js";

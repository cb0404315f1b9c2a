/**
 * @anemll-qwen35/bench: reproducible benchmark scenarios (decode, prefill, context and fusion
 * sweeps, ANE ‖ GPU parallel runs, hand-off cost, speculative acceptance, power), one versioned
 * JSON result schema, and Vega-Lite charts rendered to SVG and PNG.
 */
export * from "./backends.js";
export * from "./charts.js";
export * from "./errors.js";
export * from "./expert-skip.js";
export * from "./machine.js";
export * from "./models.js";
export * from "./powermetrics.js";
export * from "./results.js";
export * from "./run.js";
export * from "./scale.js";
export type { Scenario, ScenarioContext, ScenarioOutput } from "./scenario.js";
export { scenarios } from "./scenarios/index.js";
export * from "./schema.js";
export * from "./speculation.js";
export * from "./split-model.js";
export * from "./stats.js";
export * from "./steps.js";
export * from "./timed-backend.js";

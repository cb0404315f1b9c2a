/**
 * @anemll-qwen35/bench: reproducible benchmark scenarios (decode, prefill, context and fusion
 * sweeps, ANE ‖ GPU parallel runs, hand-off cost, speculative acceptance, power), one versioned
 * JSON result schema, and Vega-Lite charts rendered to SVG and PNG.
 */

// --- measuring parts, for tools and tests -------------------------------------------------------
export {
  type AneBackendChoice,
  type MlxStatus,
  mlxStatus,
  type OpenAneOptions,
  type Opened,
  type OpenMlxOptions,
  openAne,
  openMlx,
} from "./backends.js";
// --- charts -------------------------------------------------------------------------------------
export {
  type BarChart,
  type ChartSpec,
  type LineChart,
  type Row,
  renderSvg,
  svgToPng,
  vegaLiteSpec,
  writeChart,
} from "./charts.js";
// --- errors -------------------------------------------------------------------------------------
export { BenchModelError, BenchOptionError, BenchResultError, BenchWorkerError } from "./errors.js";
/** The 35B-A3B draft of the expert-skip scenario: the routed experts' down projections zeroed. */
export { expertSkipCheckpoint, expertSkipModel } from "./expert-skip.js";
/** The machine a result was measured on (CPU, memory, OS, load). */
export { describeMachine } from "./machine.js";
// --- the models the scenarios run, and their conversions ----------------------------------------
export {
  type ChainOptions,
  cacheRoot,
  ensureChain,
  fixtureDir,
  fixtureModel,
  type ModelSpec,
  type PreparedChain,
  scaledSyntheticModel,
  syntheticModel,
  userModel,
} from "./models.js";
export { type PowerSamples, parsePowermetrics, powerUnavailableReason, samplePower } from "./powermetrics.js";
export { defaultResultsDir, readResult, resultStem, validateResult, writeResult } from "./results.js";
// --- running scenarios -------------------------------------------------------------------------
export {
  isScenarioName,
  type RunScenarioOptions,
  rechart,
  reproduceCommand,
  runScenario,
  type ScenarioRunResult,
  summaryLines,
  writeCharts,
} from "./run.js";
/** What "smoke" and "full" mean for each scenario (models, token counts, sweeps). */
export {
  MLX_VARIANTS,
  type MlxVariant,
  type ScaleOverrides,
  type ScaleParams,
  scaleParams,
} from "./scale.js";
export type { Scenario, ScenarioContext, ScenarioOutput } from "./scenario.js";
/** Every scenario by name: its question, how it measures, and its charts. */
export { scenarios } from "./scenarios/index.js";
// --- result documents (format version 1) --------------------------------------------------------
export {
  BACKENDS,
  type BackendId,
  type BenchResult,
  benchResultSchema,
  type Conversion,
  type Machine,
  type Metric,
  type ModelInfo,
  RESULT_FORMAT,
  RESULT_FORMAT_VERSION,
  type Run,
  SCALES,
  SCENARIOS,
  type Scale,
  type ScenarioName,
  type Skip,
  type Summary,
} from "./schema.js";
export { type SpeculativeOptions, type SpeculativeRun, speculativeDecode } from "./speculation.js";
/** One model split across runtimes: the first layers on MLX, the rest on the ANE chain. */
export { SplitModel, type SplitModelOptions } from "./split-model.js";
export { medianOf, metric, percentile, summarize } from "./stats.js";
/** The greedy decode loop every scenario times (token ids in, step times and tokens out). */
export { greedy, promptIds, type RunStepsOptions, runSteps, type StepTimings, top2Margin } from "./steps.js";
/** Every predict() of every chain component timed (ms per super-block). */
export { ComponentTimer, type PredictEvent, timedBackend } from "./timed-backend.js";

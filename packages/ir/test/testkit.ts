/**
 * The repository's test helpers that ir's own tests use. They live in the private testkit package,
 * which builds on ir, so ir reaches them by path (a package dependency would be a cycle).
 */
export { tinyConfigJson, writeTokenizerFiles } from "../../testkit/src/configs.js";
export {
  type CoremltoolsValidation,
  findCoremltoolsPython,
  validateWithCoremltools,
} from "../../testkit/src/coremltools.js";
export { rng } from "../../testkit/src/random.js";
export { listDir, scratchDir, tempDir } from "../../testkit/src/temp.js";

import { packageTests } from "../../vitest.base.ts";

// the coremltools oracle (one Python start) and the op-numerics sweep take up to two minutes on an
// idle machine; every limit stretches with the machine's slowdown (vitest.base.ts)
export default packageTests({ testTimeout: 120_000, hookTimeout: 120_000 });

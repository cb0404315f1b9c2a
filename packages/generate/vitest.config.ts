import { packageTests } from "../../vitest.base.ts";

// building the real 248k-id BPE takes ~10 s idle, minutes on a loaded machine; every limit stretches
// with the machine's slowdown (vitest.base.ts)
export default packageTests({ testTimeout: 300_000 });

import { packageTests } from "../../vitest.base.ts";

// Smoke scenarios convert and run real (tiny) chains on every backend: ~30 s each on an idle
// 2-core machine, several times that while other packages' tests share the cores.
export default packageTests({ testTimeout: 240_000 });

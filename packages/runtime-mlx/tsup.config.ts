import { packageBuild } from "../../tsup.base.ts";

// the ring guard's worker thread is its own entry: ring-guard.ts starts dist/ring-guard-worker.js
export default packageBuild({
  entry: { index: "src/index.ts", "ring-guard-worker": "src/distributed/ring-guard-worker.js" },
  dts: { entry: "src/index.ts" },
});

import { packageBuild } from "../../tsup.base.ts";

export default packageBuild({
  // worker.ts is the parallel scenario's child process: its own entry next to index.js
  entry: ["src/index.ts", "src/worker.ts"],
  dts: { entry: "src/index.ts" },
});

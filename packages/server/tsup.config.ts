import { packageBuild } from "../../tsup.base.ts";

// the tokenizer worker is its own entry: prompt-tokenizer.ts starts dist/prompt-worker.js
export default packageBuild({
  entry: ["src/index.ts", "src/prompt-worker.js"],
  dts: { entry: "src/index.ts" },
});

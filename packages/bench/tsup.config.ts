import { defineConfig } from "tsup";

export default defineConfig({
  // worker.ts is the parallel scenario's child process: its own entry next to index.js
  entry: ["src/index.ts", "src/worker.ts"],
  format: ["esm"],
  dts: { entry: "src/index.ts" },
  sourcemap: true,
  clean: true,
  target: "node20",
});

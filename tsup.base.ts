/** The one tsup setup every package builds with: ESM for Node 20, declarations, source maps. */
import { defineConfig, type Options } from "tsup";

export function packageBuild(options: Options = {}) {
  return defineConfig({
    entry: ["src/index.ts"],
    format: ["esm"],
    dts: true,
    sourcemap: true,
    clean: true,
    target: "node20",
    ...options,
  });
}

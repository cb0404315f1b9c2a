/** The one vitest setup every package tests with. */
import { defineConfig } from "vitest/config";
import type { InlineConfig } from "vitest/node";

export function packageTests(test: InlineConfig = {}) {
  return defineConfig({
    // "source" resolves workspace packages to their TypeScript sources, so tests never run stale dist/
    resolve: { conditions: ["source"] },
    ssr: { resolve: { conditions: ["source"] } },
    test: { include: ["test/**/*.test.ts"], testTimeout: 60_000, pool: "forks", ...test },
  });
}

/** The one vitest setup every package tests with. */
import { defineConfig } from "vitest/config";
import type { InlineConfig } from "vitest/node";
import { measureSlowdown, slowdown } from "./packages/testkit/src/timing.ts";

/** Each test's limit on the idle reference machine, unless a package or the test says otherwise. */
const TEST_TIMEOUT_MS = 60_000;

export function packageTests(test: InlineConfig = {}) {
  // measured once for the package's run; the test processes (forks) inherit it
  process.env.ANEMLL_TEST_SLOWDOWN ??= String(measureSlowdown());
  const scale = (ms: number) => Math.round(ms * slowdown());
  return defineConfig({
    // "source" resolves workspace packages to their TypeScript sources, so tests never run stale dist/
    resolve: { conditions: ["source"] },
    ssr: { resolve: { conditions: ["source"] } },
    test: {
      include: ["test/**/*.test.ts"],
      pool: "forks",
      ...test,
      // hang detectors, not speed checks: they stretch with the machine's slowdown (testkit/timing)
      testTimeout: scale(test.testTimeout ?? TEST_TIMEOUT_MS),
      hookTimeout: scale(test.hookTimeout ?? TEST_TIMEOUT_MS),
    },
  });
}

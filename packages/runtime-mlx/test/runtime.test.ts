/** eval / asyncEval, memory counters and device selection. */
import { mkdtempSync, rmSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { MlxError, mx } from "../src/index.js";
import { describeMlx } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "runtime-mlx-eval-"));

/** A chain of matmuls big enough to take a while on the CPU backend. */
function heavy(n: number, steps: number) {
  return mx.tidy(() => {
    const w = mx.full([n, n], 1 / n);
    let x = mx.ones([n, n]);
    for (let i = 0; i < steps; i++) x = mx.matmul(x, w);
    return x;
  });
}

describeMlx("evaluation, memory, devices", () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("asyncEval does not block the event loop; sync eval does", async () => {
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      const y = heavy(512, 4);
      const started = performance.now();
      await mx.asyncEval(y);
      const asyncMs = performance.now() - started;
      const asyncTicks = ticks;
      expect((y.toTypedArray() as Float32Array)[0]).toBeCloseTo(1, 3);
      y.dispose();

      ticks = 0;
      const z = heavy(512, 4);
      const syncStarted = performance.now();
      mx.eval(z);
      const syncMs = performance.now() - syncStarted;
      const syncTicks = ticks;
      z.dispose();
      // While MLX computed (tens of ms at least), timers kept firing for the async path only (how
      // many depends on the machine's load, so one is proof enough).
      expect(asyncMs).toBeGreaterThan(20);
      expect(asyncTicks).toBeGreaterThan(0);
      expect(syncTicks).toBe(0);
      console.log(
        `asyncEval: ${asyncTicks} timer ticks in ${asyncMs.toFixed(0)} ms; sync eval: ${syncTicks} in ${syncMs.toFixed(0)} ms`,
      );
    } finally {
      clearInterval(timer);
    }
  });

  it("an error during evaluation rejects asyncEval with MlxError (and throws from eval)", async () => {
    const file = join(dir, "short.safetensors");
    mx.tidy(() => mx.saveSafetensors(file, { w: mx.ones([1000]) }));
    const { arrays } = mx.loadSafetensors(file); // lazy: nothing read yet
    const { arrays: again } = mx.loadSafetensors(file);
    truncateSync(file, 100);
    const y = mx.add(arrays.w, 1);
    // one evaluation only: whether MLX reports a failed graph again on a second evaluation is
    // up to MLX, so the test does not depend on it
    const err = await mx.asyncEval(y).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(MlxError);
    expect((err as Error).message).toMatch(/\[read\] Unable to read from file/);
    expect(() => mx.eval(again.w)).toThrow(MlxError);
    mx.dispose([arrays, again, y]);
  });

  it("memory counters: active, peak (resettable), cache (clearable), limits", () => {
    mx.synchronize();
    mx.clearCache();
    expect(mx.getCacheMemory()).toBe(0);
    const base = mx.getActiveMemory();
    const big = mx.ones([1024, 1024]); // 4 MiB
    mx.eval(big);
    expect(mx.getActiveMemory() - base).toBeGreaterThanOrEqual(4 << 20);
    expect(mx.getPeakMemory()).toBeGreaterThanOrEqual(mx.getActiveMemory());
    big.dispose();
    mx.synchronize();
    expect(mx.getActiveMemory()).toBe(base);
    expect(mx.getCacheMemory()).toBeGreaterThanOrEqual(4 << 20); // the freed buffer is cached
    expect(mx.getPeakMemory() - base).toBeGreaterThanOrEqual(4 << 20);
    mx.resetPeakMemory();
    expect(mx.getPeakMemory()).toBeLessThan(4 << 20);
    mx.clearCache();
    expect(mx.getCacheMemory()).toBe(0);
    const stats = mx.memoryStats();
    expect(stats.active).toBe(base);
    const previous = mx.setCacheLimit(1 << 20);
    expect(mx.setCacheLimit(previous)).toBe(1 << 20);
    const limit = mx.getMemoryLimit();
    expect(limit).toBeGreaterThan(0);
    expect(mx.setMemoryLimit(limit)).toBe(limit);
  });

  it("device choice: GPU only where Metal is available", () => {
    const metal = mx.metalAvailable();
    expect(mx.defaultDevice()).toBe(metal ? "gpu" : "cpu");
    if (!metal) {
      expect(() => mx.setDefaultDevice("gpu")).toThrow(MlxError);
      expect(() => mx.setDefaultDevice("gpu")).toThrow(/not available/);
    }
    mx.setDefaultDevice("cpu");
    expect(mx.defaultDevice()).toBe("cpu");
    const info = mx.deviceInfo("cpu");
    expect(Object.keys(info).length).toBeGreaterThan(0);
    if (metal) mx.setDefaultDevice("gpu");
    expect(() => mx.setDefaultDevice("tpu" as "gpu")).toThrow(TypeError);
  });
});

import { describe, expect, it } from "vitest";
import {
  CoreMLUnavailableError,
  computeDevices,
  coreMLAvailability,
  hasNeuralEngine,
  memoryFootprint,
} from "../src/index.js";

describe("compute devices and memory footprint", () => {
  it.runIf(process.platform !== "darwin")(
    "say plainly that they need macOS, and answer nothing (not even false) off macOS (skipped on macOS)",
    async () => {
      const status = coreMLAvailability("devices");
      expect(status.available).toBe(false);
      expect(status.reason).toBe(`MLAllComputeDevices needs macOS 14 or later; this is ${process.platform}`);
      for (const call of [computeDevices, hasNeuralEngine]) {
        const err = await call().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(CoreMLUnavailableError);
        expect((err as CoreMLUnavailableError).code).toBe("E_COREML_UNAVAILABLE");
        expect((err as Error).message).toBe(status.reason);
      }
      expect(() => memoryFootprint()).toThrow(CoreMLUnavailableError);
    },
  );

  const here = coreMLAvailability("devices");
  it.runIf(process.platform === "darwin" && here.available)(
    `list what MLAllComputeDevices lists on this Mac, a CPU among them${here.available ? "" : ` (skipped: ${here.reason})`}`,
    async () => {
      const devices = await computeDevices();
      expect(devices.map((d) => d.kind)).toContain("cpu");
      for (const d of devices) {
        expect(["cpu", "gpu", "neuralEngine", "other"]).toContain(d.kind);
        expect(d.className.length).toBeGreaterThan(0);
        if (d.kind === "neuralEngine") expect(d.totalCoreCount).toBeGreaterThan(0);
      }
      expect(await hasNeuralEngine()).toBe(devices.some((d) => d.kind === "neuralEngine"));
      const m = memoryFootprint();
      expect(m.physFootprint).toBeGreaterThan(0);
    },
  );
});

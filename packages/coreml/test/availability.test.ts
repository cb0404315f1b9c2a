import { describe, expect, it } from "vitest";
import { CoreMLUnavailableError, coreMLAvailability, loadCoreMLAddon } from "../src/index.js";

describe("Core ML addon availability", () => {
  it.runIf(process.platform !== "darwin")(
    "says plainly that Core ML needs macOS, and refuses to load",
    () => {
      const status = coreMLAvailability();
      expect(status.available).toBe(false);
      expect(status.reason).toMatch(/needs macOS 15 or later; this is linux/);
      expect(() => loadCoreMLAddon()).toThrow(CoreMLUnavailableError);
    },
  );

  it.runIf(process.platform === "darwin")("loads the addon built on this Mac", () => {
    const status = coreMLAvailability();
    expect(status, status.reason).toMatchObject({ available: true });
    expect(loadCoreMLAddon().macosVersion()).toMatch(/^\d+\.\d+$/);
  });
});

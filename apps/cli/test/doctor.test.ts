import { describe, expect, it } from "vitest";
import { cli } from "./helpers.js";

describe("doctor", () => {
  it("lists every backend with its availability", async () => {
    const r = await cli("doctor");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/reference\s+available/);
    expect(r.stdout).toMatch(/coreml\s+(available|unavailable)/);
    expect(r.stdout).toMatch(/mlx\s+(available|unavailable)/);
  });

  it("prints JSON with --json, and says why Core ML is unavailable off macOS", async () => {
    const r = await cli("--json", "doctor");
    const doc = JSON.parse(r.stdout);
    expect(doc.platform.node).toBe(process.version);
    const coreml = doc.backends.find((b: { name: string }) => b.name === "coreml");
    if (process.platform !== "darwin")
      expect(coreml).toMatchObject({ available: false, detail: expect.stringMatching(/macOS 15/) });
  });

  it("says whether Core ML sees a Neural Engine, and plainly when it cannot tell", async () => {
    const doc = JSON.parse((await cli("--json", "doctor")).stdout);
    const text = (await cli("doctor")).stdout;
    if (process.platform === "darwin") {
      expect(typeof doc.neuralEngine.present).toBe("boolean");
      if (doc.neuralEngine.present === false) expect(text).toMatch(/neural engine\s+none: .*virtual Mac/);
    } else {
      expect(doc.neuralEngine).toEqual({ present: null, detail: expect.stringMatching(/macOS 14/) });
      expect(text).toMatch(/neural engine\s+unknown: MLAllComputeDevices needs macOS 14/);
    }
  });

  it("exits 2 on an unknown command", async () => {
    const r = await cli("frobnicate");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown command/);
  });
});

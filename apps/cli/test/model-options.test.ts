import type { PrefillCheckResult } from "@anemll-qwen35/runtime-ane";
import { describe, expect, it } from "vitest";
import { loadOptions, type ModelOptions } from "../src/model.js";

const base: ModelOptions = {
  backend: "auto",
  precision: "fp32",
  computeUnits: "cpuAndNeuralEngine",
  contextOverflow: "error",
};

const verdict = (over: Partial<PrefillCheckResult>): PrefillCheckResult => ({
  keep: false,
  reason: "prefill function dropped: 2 of 102 ops of sb0's prefill_64 run off the ANE",
  source: "checked",
  checkedAt: "2026-12-01T00:00:00.000Z",
  machine: "m",
  T: 64,
  prefillMs: 1,
  decodeMs: 1,
  placements: [],
  warnings: [],
  ...over,
});

describe("the model options' load options", () => {
  it("--recheck asks for the prefill check again; without it the recorded verdict is used", () => {
    expect(loadOptions({ ...base, recheck: true }, () => {}).prefillCheck).toBe("recheck");
    expect(loadOptions(base, () => {}).prefillCheck).toBeUndefined();
  });

  it("says the prefill check's verdict in one line when it was measured, and a recorded fallback", () => {
    const lines: string[] = [];
    const o = loadOptions(base, (s) => lines.push(s));
    o.onProgress?.({
      stage: "prefill-check",
      result: verdict({ warnings: ["1 of 9 ops of lm_head's main run off the ANE"] }),
    });
    o.onProgress?.({ stage: "prefill-check", result: verdict({ source: "recorded" }) });
    o.onProgress?.({
      stage: "prefill-check",
      result: verdict({ source: "recorded", keep: true, reason: "kept" }),
    });
    o.onProgress?.({ stage: "notice", message: "Core ML sees no Neural Engine on this Mac" });
    expect(lines).toEqual([
      "prefill check: prefill function dropped: 2 of 102 ops of sb0's prefill_64 run off the ANE",
      "prefill check: 1 of 9 ops of lm_head's main run off the ANE",
      "prefill check (recorded 2026-12-01T00:00:00.000Z, --recheck to measure again): prefill function dropped: 2 of 102 ops of sb0's prefill_64 run off the ANE",
      "Core ML sees no Neural Engine on this Mac",
    ]);
  });
});

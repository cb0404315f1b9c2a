/** projectSpeculativeDecode: the round cost of speculation with the MTP head, calibrated to a plain speed. */
import { describe, expect, it } from "vitest";
import { FITTED_RUNTIME, projectSpeculativeDecode } from "../src/index.js";

const model = {
  name: "m",
  plainTokS: 50,
  plainSource: "test",
  trunkBytes: 500e6,
  lmHeadBytes: 100e6,
  headBytes: 20e6,
  gdnStateBytes: 5e6,
  calls: 2,
};
const d = FITTED_RUNTIME.dispatchMs.value;

describe("projectSpeculativeDecode", () => {
  it("calibrates the bandwidth to the plain speed and costs each call by its bytes", () => {
    const p = projectSpeculativeDecode(model, [{ gamma: 2, meanAccepted: 1 }]);
    const msPerByte = (1000 / 50 - 2 * d) / 500e6;
    expect(p.effectiveGBps).toBeCloseTo(1 / msPerByte / 1e6, 6);
    expect(p.draftMs).toBeCloseTo(2 * d + 120e6 * msPerByte, 9);
    expect(p.headMs).toBeCloseTo(d + 20e6 * msPerByte, 9);
    // verify of 3 rows: the trunk once, the state picked from 4 and 3 rows written (5 more than a step)
    expect(p.verifyMs).toBeCloseTo(2 * d + (500e6 + 5 * 5e6) * msPerByte, 9);
    const r = p.rows[0];
    expect(r.roundMs).toBeCloseTo(p.verifyMs + 2 * p.draftMs + 1 * p.headMs, 9);
    expect(r.tokS).toBeCloseTo((1000 * 2) / r.roundMs, 9);
    expect(r.speedup).toBeCloseTo(r.tokS / 50, 9);
  });

  it("pays for drafts nobody accepts, and gains with acceptance", () => {
    const p = projectSpeculativeDecode(model, [
      { gamma: 1, meanAccepted: 0 },
      { gamma: 1, meanAccepted: 0.5 },
      { gamma: 1, meanAccepted: 1 },
    ]);
    expect(p.rows[0].speedup).toBeLessThan(1);
    expect(p.rows[1].tokS).toBeGreaterThan(p.rows[0].tokS);
    expect(p.rows[2].tokS).toBeGreaterThan(p.rows[1].tokS);
  });

  it("refuses a plain speed that leaves no time after dispatch", () => {
    expect(() => projectSpeculativeDecode({ ...model, plainTokS: 1000 }, [])).toThrow(RangeError);
  });
});

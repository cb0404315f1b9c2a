/**
 * The converter's output does not change unless it is meant to: every case of
 * digests/cases.ts is converted with the code of today and compared with
 * digests/digests.json, recorded by the code before (digests/record.ts; rerun it only to accept a
 * deliberate change). A package's digest covers its model.mlmodel and weight files byte for byte.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { DIGEST_CASES, DIGESTS_FILE, type DigestRecord, recordCase } from "./digests/cases.js";

const recorded = JSON.parse(readFileSync(DIGESTS_FILE, "utf8")) as {
  recordedAt: string;
  cases: Record<string, DigestRecord>;
};

describe(`converted packages are byte-identical to those of ${recorded.recordedAt}`, () => {
  it("records every case", () => {
    expect(Object.keys(recorded.cases)).toEqual(DIGEST_CASES.map((c) => c.name));
  });
  for (const c of DIGEST_CASES) {
    it(c.name, async () => {
      expect(await recordCase(c)).toEqual(recorded.cases[c.name]);
    });
  }
});

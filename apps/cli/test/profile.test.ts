import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { cli } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");

describe("profile", () => {
  it(
    "times a converted chain per op and per package and writes -j FILE",
    async () => {
      const work = mkdtempSync(join(tmpdir(), "profile-"));
      const model = join(work, "m");
      const c = await cli("convert", FIXTURE, "-o", model, "--ctx", "128");
      expect(c.code, c.stderr).toBe(0);
      const file = join(work, "p.json");
      const r = await cli("profile", model, "--runs", "2", "--warmup", "0", "-j", file);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/disagree most/);
      expect(r.stdout).toMatch(/per token: interpreter/);
      expect(r.stdout).toMatch(/instrumentation: .* is this profiler's own timing/);
      const saved = JSON.parse(readFileSync(file, "utf8"));
      expect(saved.schema).toBe("anemll-qwen35.profile");
      const names = saved.packages.map((p: { name: string }) => p.name);
      // the embedding is read on the host (no package call to time): the super-blocks come first
      expect(names).not.toContain("embed");
      expect(names[0]).toMatch(/^sb_/);
      expect(names.at(-1)).toBe("lm_head");
      for (const p of saved.packages) {
        expect(p.interpreterRunsMs).toHaveLength(2);
        expect(p.ops.length).toBeGreaterThan(0);
      }
      if (process.platform !== "darwin") expect(r.stdout).toMatch(/Core ML timing: unavailable/);
      // one package alone, and the JSON on stdout
      const pkg = join(model, `${saved.packages[0].name}.mlpackage`);
      const one = await cli("--json", "profile", saved.packages[0].path ?? pkg, "--runs", "1");
      expect(one.code, one.stderr).toBe(0);
      expect(JSON.parse(one.stdout).target.kind).toBe("package");
      const bad = await cli("profile", join(work, "nope"));
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/does not exist/);
      expect((await cli("profile", model, "--runs", "0")).code).toBe(2);
    },
    timeLimit(120_000),
  );
});

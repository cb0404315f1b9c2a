import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";

const ROOT = resolve(__dirname, "../../..");

describe("the packages as users install them (npm, from their tarballs)", () => {
  it(
    "pack, install outside the workspace, import, run the CLI bin, type-check, publish dry-run, version",
    () => {
      const r = spawnSync(process.execPath, [join(ROOT, "scripts", "pack-install.mjs")], {
        encoding: "utf8",
        timeout: timeLimit(15 * 60_000),
      });
      expect(r.stderr + r.stdout).toMatch(/ok: \d+ packages installed and used from their tarballs/);
      expect(r.status).toBe(0);
    },
    timeLimit(16 * 60_000),
  );
});

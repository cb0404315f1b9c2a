import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { cli, runCli } from "./helpers.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-tied");

describe("chat", () => {
  it(
    "answers each turn, honours /think, /reset and /exit, and prints stats",
    async () => {
      const dir = join(mkdtempSync(join(tmpdir(), "chat-")), "m");
      expect(
        (await cli("convert", FIXTURE, "-o", dir, "--ctx", "256", "--lut", "none", "--lmhead-lut", "none"))
          .code,
      ).toBe(0);
      // a real process with piped stdin, as a user would drive it
      const r = await runCli(["chat", dir, "--backend", "reference", "--max-tokens", "3"], {
        input: "Hi!\n/think on\nAnd you?\n/reset\n/nope\nHello\n/exit\nnever read\n",
      });
      expect(r.code, r.stderr).toBe(0);
      const stats = r.stderr.match(/decode [\d.]+ tok\/s/g) ?? [];
      expect(stats).toHaveLength(3); // three user turns answered; "never read" came after /exit
      expect(r.stderr).toMatch(/thinking on/);
      expect(r.stderr).toMatch(/conversation cleared/);
      expect(r.stderr).toMatch(/unknown command \/nope/);
    },
    timeLimit(60_000),
  );
});

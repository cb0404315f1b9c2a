import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { CHAIN_FORMAT, readChainManifest } from "@anemll-qwen35/ir/chain";
import { describe, expect, it } from "vitest";
import { convert, OutputError } from "../src/index.js";
import { PARTIAL_MARKER } from "../src/output.js";

const tied = resolve(__dirname, "../../../fixtures/tiny-tied");
const fresh = () => mkdtempSync(join(tmpdir(), "convert-out-"));
// no k-means: the fastest conversion of the fixture
const fast = {
  ctx: 128,
  fuse: 1 as const,
  body: { kind: "none" as const },
  lmHead: { kind: "none" as const },
};

/**
 * A folder that looks like an earlier conversion (model.json's format, components and tokenizer
 * files are looked at), with a package the new one will not write, and what a user added to it.
 */
function previousConversion(dir: string): void {
  mkdirSync(join(dir, "sb_99.mlpackage"), { recursive: true });
  writeFileSync(join(dir, "sb_99.mlpackage", "Manifest.json"), "{}");
  writeFileSync(join(dir, "vocab.txt"), "old tokenizer file");
  writeFileSync(
    join(dir, "model.json"),
    JSON.stringify({
      format: CHAIN_FORMAT,
      components: [{ file: "sb_99.mlpackage" }, { file: "../outside" }],
      tokenizer: { files: ["vocab.txt"] },
    }),
  );
  writeFileSync(join(dir, "NOTES.txt"), "my notes");
  mkdirSync(join(dir, "eval"));
  writeFileSync(join(dir, "eval", "scores.csv"), "1,2,3");
}

describe("convert -o: what it may replace", () => {
  it("refuses a folder with other files, and leaves them alone", async () => {
    const out = join(fresh(), "mine");
    mkdirSync(out);
    writeFileSync(join(out, "notes.txt"), "keep me");
    const err = await convert({ model: tied, out, ...fast }).catch((e) => e);
    expect(err).toBeInstanceOf(OutputError);
    expect(err.message).toMatch(/not a previous conversion \(it holds notes\.txt\).*--force/);
    expect(readFileSync(join(out, "notes.txt"), "utf8")).toBe("keep me");
    expect(existsSync(`${out}.partial`)).toBe(false);
  });

  it("refuses the current folder (-o .) when it is not a conversion", async () => {
    const cwd = process.cwd();
    const dir = fresh();
    writeFileSync(join(dir, "work.txt"), "x");
    process.chdir(dir);
    try {
      await expect(convert({ model: tied, out: ".", ...fast })).rejects.toThrow(OutputError);
    } finally {
      process.chdir(cwd);
    }
    expect(existsSync(join(dir, "work.txt"))).toBe(true);
  });

  it("refuses a plain file at the output path", async () => {
    const out = join(fresh(), "file");
    writeFileSync(out, "data");
    await expect(convert({ model: tied, out, ...fast })).rejects.toThrow(/is a file, not a folder/);
    expect(readFileSync(out, "utf8")).toBe("data");
  });

  it("refuses the source checkpoint and a folder that holds it, even with --force", async () => {
    const root = fresh();
    const src = join(root, "ckpt");
    cpSync(tied, src, { recursive: true });
    for (const out of [src, root, join(src, ".")]) {
      const err = await convert({ model: src, out, force: true, ...fast }).catch((e) => e);
      expect(err).toBeInstanceOf(OutputError);
      expect(err.message).toMatch(/checkpoint being converted/);
    }
    expect(existsSync(join(src, "config.json"))).toBe(true);
  });

  it("refuses an unrelated <out>.partial, but reuses its own", async () => {
    const out = join(fresh(), "model");
    mkdirSync(`${out}.partial`);
    writeFileSync(join(`${out}.partial`, "thesis.tex"), "years of work");
    await expect(convert({ model: tied, out, ...fast })).rejects.toThrow(/\.partial: .*work folder/);
    expect(existsSync(join(`${out}.partial`, "thesis.tex"))).toBe(true);
  });

  it("keeps a previous conversion until the new one is complete, then replaces it", async () => {
    const out = join(fresh(), "model");
    previousConversion(out);
    // interrupted: the old conversion is untouched and the work folder is marked as ours
    const ac = new AbortController();
    await expect(
      convert({
        model: tied,
        out,
        ...fast,
        signal: ac.signal,
        onProgress: (e) => e.stage === "component" && ac.abort(),
      }),
    ).rejects.toThrow();
    expect(readFileSync(join(out, "NOTES.txt"), "utf8")).toBe("my notes");
    expect(existsSync(join(out, "sb_99.mlpackage"))).toBe(true);
    expect(existsSync(join(`${out}.partial`, PARTIAL_MARKER))).toBe(true);
    // completed: what the previous conversion wrote is replaced, what the user added is kept
    const logs: string[] = [];
    await convert({ model: tied, out, ...fast, onLog: (l) => logs.push(l) });
    expect(existsSync(join(out, "sb_99.mlpackage"))).toBe(false);
    expect(existsSync(join(out, "vocab.txt"))).toBe(false);
    expect(readFileSync(join(out, "NOTES.txt"), "utf8")).toBe("my notes");
    expect(readFileSync(join(out, "eval", "scores.csv"), "utf8")).toBe("1,2,3");
    expect(logs.at(-1)).toMatch(
      /kept what the folder held besides the conversion: (NOTES\.txt, eval|eval, NOTES\.txt)$/,
    );
    expect((await readChainManifest(out)).components.length).toBeGreaterThan(2);
    expect(readdirSync(dirname(out)).filter((n) => n.includes(".old-"))).toEqual([]);
    expect(existsSync(join(out, PARTIAL_MARKER))).toBe(false);
    expect(existsSync(`${out}.partial`)).toBe(false);
  });

  it("converting again keeps what a user added; a second conversion in a row keeps it too", async () => {
    const out = join(fresh(), "model");
    await convert({ model: tied, out, ...fast });
    writeFileSync(join(out, "NOTES.txt"), "converted on a Tuesday");
    await convert({ model: tied, out, ...fast, ctx: 256 });
    expect(readFileSync(join(out, "NOTES.txt"), "utf8")).toBe("converted on a Tuesday");
    expect((await readChainManifest(out)).ctx).toBe(256);
    await convert({ model: tied, out, ...fast });
    expect(readFileSync(join(out, "NOTES.txt"), "utf8")).toBe("converted on a Tuesday");
  });

  it("--force converts into a folder that is not a conversion, replacing only the files a conversion writes", async () => {
    const out = join(fresh(), "mine");
    mkdirSync(out);
    writeFileSync(join(out, "notes.txt"), "keep me");
    writeFileSync(join(out, "config.json"), "{}");
    await convert({ model: tied, out, force: true, ...fast });
    expect(readFileSync(join(out, "notes.txt"), "utf8")).toBe("keep me");
    expect(readFileSync(join(out, "config.json"), "utf8")).toBe(
      readFileSync(join(tied, "config.json"), "utf8"),
    );
    expect(existsSync(join(out, "model.json"))).toBe(true);
  });
});

import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { readChainManifest } from "@anemll-qwen35/ir/chain";
import { describe, expect, it } from "vitest";
import {
  ConvertInterruptedError,
  ConvertOptionError,
  convert,
  OutputError,
  UnsupportedModelError,
} from "../src/index.js";

const FIXTURES = resolve(__dirname, "../../../fixtures");
const tied = join(FIXTURES, "tiny-tied");
const fresh = () => mkdtempSync(join(tmpdir(), "convert-"));

describe("convert", () => {
  it("writes the packages, tokenizer files and a model.json that validates", async () => {
    const out = join(fresh(), "tiny");
    const stages: string[] = [];
    const r = await convert({
      model: tied,
      out,
      ctx: 128,
      fuse: 1,
      lmHeadMaxRows: 512,
      onProgress: (e) => stages.push(`${e.stage}:${e.component ?? ""}`),
    });
    const m = await readChainManifest(out);
    expect(m.components.map((c) => c.file)).toEqual([
      "embed.mlpackage",
      "sb_00.mlpackage",
      "sb_01.mlpackage",
      "lm_head.mlpackage",
    ]);
    // the default policy, recorded by role
    expect(m.quantization).toMatchObject({ body: "mixed", lmHead: "lut6", embed: "none", groupSize: 8 });
    expect(m.quantization.policy).toBe("default");
    expect(m.quantization.encodings).toMatchObject({
      "gdn.in_proj_a": "none",
      "gdn.in_proj_b": "none",
      "gdn.in_proj_qkv": "lut6,8",
      "gdn.out_proj": "lut6,8",
      "gdn.in_proj_z": "lut6,8",
      "attn.q_proj": "lut6,8",
      "mlp.down_proj": "lut6,8",
      lm_head: "lut6,8",
      embed: "none",
    });
    expect(m.attention).toBe("matmul");
    expect(m.ctx).toBe(128);
    expect(m.tokenizer.files).toContain("tokenizer.json");
    expect(m.tokenizer.eosTokenIds.length).toBeGreaterThan(0);
    for (const c of m.components) expect(existsSync(join(out, c.file))).toBe(true);
    expect(existsSync(`${out}.partial`)).toBe(false);
    expect(stages.at(-1)).toBe("finish:");
    expect(
      r.weights.filter((w) => w.role === "gdn.in_proj_qkv").every((w) => w.encoding.startsWith("lut6")),
    ).toBe(true);
    expect(
      r.weights.filter((w) => w.role === "mlp.down_proj").every((w) => w.encoding.startsWith("lut6")),
    ).toBe(true);
    expect(r.weights.filter((w) => w.role === "gdn.in_proj_a").every((w) => w.encoding === "fp16")).toBe(
      true,
    );
  });

  it("takes a policy text and the shorthands, records both in model.json, and refuses a pattern that matches nothing", async () => {
    const out = join(fresh(), "tiny");
    await convert({
      model: tied,
      out,
      ctx: 128,
      attention: "sdpa",
      quant: "lut4,layers.3.*=lut8,gdn.in_proj_a=none",
      lmHead: { kind: "int8" },
    });
    const m = await readChainManifest(out);
    expect(m.attention).toBe("sdpa");
    expect(m.quantization.policy).toBe("lut4,lm_head=int8,layers.3.*=lut8,gdn.in_proj_a=none");
    expect(m.quantization.encodings).toMatchObject({
      "layers.3.self_attn.q_proj.weight": "lut8,8",
      "layers.7.self_attn.q_proj.weight": "lut4,8",
      "gdn.in_proj_a": "none",
      "gdn.in_proj_b": "lut4,8",
      lm_head: "int8",
    });
    expect(m.quantization).toMatchObject({ body: "mixed", lmHead: "int8" });
    const sb = m.components.find((c) => c.kind === "superblocks");
    expect(sb?.io.inputs.find((t) => t.name === "mask")?.role).toMatchObject({ rule: "io", keys: 129 });

    const bad = convert({ model: tied, out: join(fresh(), "x"), ctx: 128, quant: "gdn.in_proj_qvk=lut6" });
    await expect(bad).rejects.toThrow(ConvertOptionError);
    await expect(
      convert({ model: tied, out: join(fresh(), "x"), ctx: 128, quant: "gdn.in_proj_qvk=lut6" }),
    ).rejects.toThrow(/"gdn\.in_proj_qvk" matches no tensor/);
    await expect(convert({ model: tied, out: join(fresh(), "x"), ctx: 128, quant: "lut5" })).rejects.toThrow(
      /--quant unknown preset "lut5"/,
    );
  });

  it("resumes an interrupted conversion, skipping components whose checksums match", async () => {
    const out = join(fresh(), "tiny");
    const ac = new AbortController();
    await expect(
      convert({
        model: tied,
        out,
        ctx: 128,
        fuse: 1,
        signal: ac.signal,
        onProgress: (e) => {
          if (e.stage === "component" && e.component === "sb_01") ac.abort();
        },
      }),
    ).rejects.toThrow();
    expect(existsSync(out)).toBe(false); // never looks complete
    expect(existsSync(join(`${out}.partial`, "sb_00.mlpackage"))).toBe(true);
    const r = await convert({ model: tied, out, ctx: 128, fuse: 1, resume: true });
    expect(r.skipped).toEqual(["embed", "sb_00"]);
    expect((await readChainManifest(out)).components).toHaveLength(4);
  });

  it("keeps the finished weights of an interrupted package and reuses them on resume, for the same bytes", async () => {
    // every projection a LUT: the journal keeps k-means results (plain fp16 weights are cheap to redo)
    const opts = { model: tied, ctx: 128, fuse: "all" as const, lmHeadMaxRows: 512, quant: "lut6" };
    const ref = await convert({ ...opts, out: join(fresh(), "ref") });
    const out = join(fresh(), "tiny");
    const ac = new AbortController();
    // only k-means (LUT) weights are journaled: stop after the fifth of them
    const lut = new Set(ref.weights.filter((w) => w.encoding.startsWith("lut")).map((w) => w.name));
    let done = 0;
    const stopped = convert({
      ...opts,
      out,
      signal: ac.signal,
      onProgress: (e) => {
        if (e.stage === "tensor" && e.component === "sb_00-01" && lut.has(e.tensor ?? "") && ++done === 5)
          ac.abort();
      },
    });
    await expect(stopped).rejects.toThrow(ConvertInterruptedError);
    await expect(stopped).rejects.toThrow(/1 finished package\(s\) and 5 finished weight\(s\).*--resume/);
    expect(existsSync(out)).toBe(false);
    const r = await convert({ ...opts, out, resume: true });
    expect(r.skipped).toEqual(["embed"]);
    expect(r.reusedWeights).toHaveLength(5);
    expect(r.weights.filter((w) => w.reused).map((w) => w.name)).toEqual(r.reusedWeights);
    expect(r.manifest.components.map((c) => c.sha256)).toEqual(ref.manifest.components.map((c) => c.sha256));
    expect(existsSync(join(out, ".resume"))).toBe(false);
  });

  it("reports progress per weight, its fraction only growing", async () => {
    const events: { stage: string; tensor?: string; fraction: number }[] = [];
    const r = await convert({
      model: tied,
      out: join(fresh(), "p"),
      ctx: 128,
      lmHeadMaxRows: 512,
      onProgress: (e) => events.push(e),
    });
    const tensors = events.filter((e) => e.stage === "tensor");
    expect(tensors.map((e) => e.tensor)).toEqual(r.weights.map((w) => w.name));
    for (let i = 1; i < events.length; i++)
      expect(events[i].fraction).toBeGreaterThanOrEqual(events[i - 1].fraction);
    expect(events.at(-1)?.fraction).toBe(1);
  });

  it("keeps an explicit fuse over the budget and warns once per cause, with readable sizes", async () => {
    const lines: string[] = [];
    const r = await convert({
      model: tied,
      out: join(fresh(), "f"),
      ctx: 128,
      fuse: 2,
      budgetBytes: 100_000,
      lmHeadMaxRows: 512,
      onLog: (l) => lines.push(l),
    });
    expect(r.manifest.components.map((c) => c.file)).toEqual([
      "embed.mlpackage",
      "sb_00-01.mlpackage",
      "lm_head.mlpackage",
    ]);
    const warnings = lines.filter((l) => l.startsWith("warning:"));
    expect(warnings).toHaveLength(3);
    expect(warnings[0]).toMatch(/--fuse 2 makes sb_00-01 \(~\d\.\d\d MB\) larger than the 100 kB budget/);
    expect(warnings[1]).toMatch(
      /embed\.mlpackage is ~262 kB \(unquantized\), over the 100 kB budget; --embed-lut 8/,
    );
    expect(warnings[2]).toMatch(/lm_head\.mlpackage is ~\d+ kB, over the 100 kB budget/);
    expect(lines.join("\n")).not.toMatch(/0\.00 GB/);
  });

  it("rejects bad options and inputs with clear errors", async () => {
    const out = join(fresh(), "x");
    await expect(convert({ model: tied, out, ctx: 64 })).rejects.toThrow(ConvertOptionError);
    await expect(convert({ model: tied, out, ctx: 32768 })).rejects.toThrow(
      /--ctx must be an integer from 128 to 16384/,
    );
    await expect(convert({ model: tied, out, buckets: [512, 256] })).rejects.toThrow(/--buckets must ascend/);
    await expect(convert({ model: tied, out, ctx: 4096 })).rejects.toThrow(
      /--ctx 4096 exceeds the model's max_position_embeddings \(2048\)/,
    );
    expect(existsSync(`${out}.partial`)).toBe(false); // refused before any work
    await expect(convert({ model: join(FIXTURES, "tiny-moe"), out })).rejects.toThrow(UnsupportedModelError);
    await expect(convert({ model: join(FIXTURES, "tiny-moe"), out })).rejects.toThrow(/runtime-mlx/);
    await expect(convert({ model: "/no/such/model", out })).rejects.toThrow(/does not exist/);
    if (process.getuid?.() !== 0) {
      const ro = fresh();
      chmodSync(ro, 0o500);
      await expect(convert({ model: tied, out: join(ro, "m") })).rejects.toThrow(OutputError);
    } else {
      // root can write anywhere: use a path under a regular file instead
      const parent = join(fresh(), "file");
      mkdirSync(parent);
      const blocker = join(parent, "f");
      (await import("node:fs")).writeFileSync(blocker, "");
      await expect(convert({ model: tied, out: join(blocker, "m") })).rejects.toThrow(OutputError);
    }
    expect(readdirSync(join(out, "..")).filter((f) => !f.startsWith("."))).toEqual([]);
  });

  it("names the field or tensor when the checkpoint is not a dense Qwen3.5", async () => {
    const copy = (edit: (dir: string) => void) => {
      const dir = join(fresh(), "ckpt");
      cpSync(tied, dir, { recursive: true });
      edit(dir);
      return dir;
    };
    const out = join(fresh(), "out");
    const llama = copy((d) => {
      const c = JSON.parse(readFileSync(join(d, "config.json"), "utf8"));
      writeFileSync(join(d, "config.json"), JSON.stringify({ ...c, model_type: "llama" }));
    });
    await expect(convert({ model: llama, out })).rejects.toThrow(/model_type/);
    const missing = copy((d) => {
      const index = JSON.parse(readFileSync(join(d, "model.safetensors.index.json"), "utf8"));
      delete index.weight_map["model.language_model.layers.1.linear_attn.out_proj.weight"];
      writeFileSync(join(d, "model.safetensors.index.json"), JSON.stringify(index));
    });
    await expect(convert({ model: missing, out })).rejects.toThrow(
      /layers\.1\.linear_attn\.out_proj\.weight/,
    );
    const misshaped = copy((d) => {
      const c = JSON.parse(readFileSync(join(d, "config.json"), "utf8"));
      c.text_config.intermediate_size = 512;
      writeFileSync(join(d, "config.json"), JSON.stringify(c));
    });
    await expect(convert({ model: misshaped, out })).rejects.toThrow(
      /mlp\.gate_proj\.weight.*512|512.*mlp\.gate_proj/s,
    );
    expect(existsSync(out)).toBe(false);
  });
});

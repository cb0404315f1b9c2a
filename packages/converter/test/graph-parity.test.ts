/**
 * Parity of the converted decode chain against the Hugging Face goldens (fp32, eager) of the tiny
 * fixtures: packages are built, written as .mlpackage, read back and run token by token through
 * the ir interpreter by a chain loop that binds everything by ComponentIO role (test/chain.ts).
 * The measured numbers are printed (one "[parity]" line each) for the conversion report.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tensor, toFloat32 } from "@anemll-qwen35/core";
import { argmax, cosine, maxAbsDiff, Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { checkProgram, MilInterpreter, MlPackageWriter, readMlPackage } from "@anemll-qwen35/ir/mil";
import { validateWithCoremltools } from "@anemll-qwen35/testkit";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type BuildOptions,
  buildComponent,
  type ComponentSpec,
  planPieces,
  type WeightEncodingReport,
} from "../src/graph/index.js";
import { DEFAULT_QUANT_RULES, QUANT_PRESETS } from "../src/index.js";
import { type ChainPart, type ChainParts, ReferenceChain, type RunResult, runChain } from "./chain.js";
import { type FixtureGolden, fixtureDir, hasFixture, klDivergence, loadFixtureGolden } from "./golden.js";

const CTX = 32;
/** Every package the tests write (validated by coremltools at the end, in one Python call). */
const written: string[] = [];
let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "anemll-graph-"));
});
afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});
const report = (name: string, what: string, value: unknown) =>
  console.log(`[parity] ${name} ${what}: ${typeof value === "string" ? value : JSON.stringify(value)}`);

for (const name of ["tiny-tied", "tiny-gqa", "tiny-trained"]) {
  describe.skipIf(!hasFixture(name))(`${name} (fixtures/${name})`, () => {
    let ck: Qwen35Checkpoint;
    let g: FixtureGolden;
    let dir: string;
    /** HF logits per step: prompt positions, then decode steps. */
    let hfRows: Float32Array[];
    let fp16Run: RunResult;
    let fp32Run: RunResult;
    /** The fp16 chain (super-blocks fused) and the fp32 chain (one package per super-block). */
    let parts16: ChainParts;
    let parts32: ChainParts;
    /** onWeight reports of the plain fp16 chain. */
    const fp16Reports: WeightEncodingReport[] = [];

    beforeAll(async () => {
      ck = await Qwen35Checkpoint.open(fixtureDir(name));
      g = await loadFixtureGolden(name);
      hfRows = [...g.promptLogits, ...g.decodeLogits];
      dir = join(root, name);
    });
    afterAll(async () => {
      await ck?.close();
    });

    /** Builds one component into a package (weights streamed to its weight file) and reads it back. */
    async function pkg(file: string, spec: ComponentSpec, options: BuildOptions): Promise<ChainPart> {
      const path = join(dir, `${file}.mlpackage`);
      const w = await MlPackageWriter.create(path);
      let io: ChainPart["io"];
      try {
        const built = await buildComponent(ck, spec, { ...options, blobSink: w.blobs });
        io = built.io;
        await w.finish(built.model);
      } catch (e) {
        await w.abort();
        throw e;
      }
      written.push(path);
      const model = await readMlPackage(path, { check: (m) => checkProgram(m.program) });
      return { model, io };
    }

    /** A whole chain; `split` = one package per super-block, else all super-blocks fused in one. */
    async function chain(
      tag: string,
      options: BuildOptions,
      split = false,
      head: BuildOptions = options,
    ): Promise<ChainParts> {
      const n = ck.config.superBlocks.length;
      const superblocks = split
        ? await Promise.all(
            Array.from({ length: n }, (_, s) =>
              pkg(`${tag}_sb${s}`, { kind: "superblocks", first: s, count: 1 }, options),
            ),
          )
        : [await pkg(`${tag}_sb`, { kind: "superblocks", first: 0, count: n }, options)];
      return {
        embed: await pkg(`${tag}_embed`, { kind: "embed" }, options),
        superblocks,
        lmHead: await pkg(`${tag}_head`, { kind: "lm_head" }, head),
      };
    }

    const steps = () => g.decodeLogits.length;
    const maxDiff = (r: RunResult, rows: Float32Array[]) =>
      Math.max(...r.logits.map((l, i) => maxAbsDiff(l, rows[i])));

    it("fp32 program, fp32 interpreter: logits within 1e-3 of HF at every step, identical greedy tokens, per-super-block hidden states", async () => {
      parts32 = await chain("fp32", { ctx: CTX, dtype: "fp32" }, true);
      fp32Run = await runChain(new ReferenceChain(parts32, { precision: "fp32" }), g.promptIds, steps());
      const T = g.promptIds.length;
      const prompt = Math.max(...g.promptLogits.map((l, t) => maxAbsDiff(fp32Run.logits[t], l)));
      const decode = Math.max(...g.decodeLogits.map((l, i) => maxAbsDiff(fp32Run.logits[T + i], l)));
      report(
        name,
        "fp32 max |Δlogit| prompt / decode",
        `${prompt.toExponential(2)} / ${decode.toExponential(2)}`,
      );
      expect(fp32Run.logits).toHaveLength(T + steps());
      expect(prompt).toBeLessThanOrEqual(1e-3);
      expect(decode).toBeLessThanOrEqual(1e-3);
      expect(fp32Run.tokens).toEqual(g.generatedIds);
      expect(fp32Run.nonFinite).toEqual([]);

      // hidden states at the package boundaries, prompt positions (HF: [0] embedding, [i] after layer i-1)
      const L = ck.config.numHiddenLayers;
      let worst = 0;
      for (let t = 0; t < T; t++) {
        worst = Math.max(worst, maxAbsDiff(fp32Run.embedded[t], g.hiddenStates[0][t]));
        fp32Run.hidden[t].forEach((h, s) => {
          const after = 4 * (s + 1); // layers done after super-block s
          const ref = after < L ? g.hiddenStates[after][t] : g.lastLayerPrenorm[t];
          worst = Math.max(worst, maxAbsDiff(h, ref) / Math.max(1, Math.max(...ref.map(Math.abs))));
        });
      }
      report(name, "fp32 max relative |Δhidden| after embed and each super-block", worst.toExponential(2));
      expect(worst).toBeLessThanOrEqual(1e-4);
    });

    it("fp32: super-blocks fused in 1 package give the same logits as 2 packages of 1", async () => {
      const parts = await chain("fp32fused", { ctx: CTX, dtype: "fp32" }, false);
      expect(parts.superblocks).toHaveLength(1);
      expect(parts.superblocks[0].io.layers).toEqual([...Array(ck.config.numHiddenLayers).keys()]);
      const fused = await runChain(new ReferenceChain(parts, { precision: "fp32" }), g.promptIds, steps());
      const d = maxDiff(fused, fp32Run.logits);
      report(name, "fused vs split max |Δlogit|", d.toExponential(2));
      expect(d).toBeLessThanOrEqual(1e-6);
      expect(fused.tokens).toEqual(fp32Run.tokens);
    });

    it("fp16 program, fp16 interpreter (subnormals flushed, as the ANE): identical tokens, cosine ≥ 0.999 per step, no inf/NaN", async () => {
      parts16 = await chain("fp16", { ctx: CTX, onWeight: (r) => fp16Reports.push(r) }, false);
      const parts = parts16;
      for (const p of [parts.embed, ...parts.superblocks, parts.lmHead]) {
        const fp32Io = [...p.io.inputs, ...p.io.outputs].filter((t) => t.dtype === "fp32");
        expect(fp32Io, "an fp16 program has no fp32 I/O").toEqual([]);
      }
      fp16Run = await runChain(
        new ReferenceChain(parts, { precision: "fp16", flushSubnormals: true }),
        g.promptIds,
        steps(),
      );
      const cos = fp16Run.logits.map((l, i) => cosine(l, hfRows[i]));
      report(
        name,
        "fp16 min cosine / max |Δlogit|",
        `${Math.min(...cos).toFixed(6)} / ${maxDiff(fp16Run, hfRows).toFixed(4)}`,
      );
      expect(fp16Run.nonFinite).toEqual([]);
      expect(fp16Run.tokens).toEqual(g.generatedIds);
      for (const c of cos) expect(c).toBeGreaterThanOrEqual(0.999);

      const asFp32 = await runChain(new ReferenceChain(parts, { precision: "fp32" }), g.promptIds, steps());
      report(name, "fp16 program in fp32 mode max |Δlogit| (no bar)", maxDiff(asFp32, hfRows).toFixed(4));
      expect(asFp32.tokens).toEqual(g.generatedIds);
    });

    it("KV as a Core ML state (mlstate) gives the same tokens as KV as I/O, in fp16 and fp32", async () => {
      const n = ck.config.superBlocks.length;
      const sb16 = await pkg(
        "mlstate16_sb",
        { kind: "superblocks", first: 0, count: n },
        { ctx: CTX, state: "mlstate" },
      );
      expect(sb16.io.states).toHaveLength(1);
      expect(sb16.io.states[0].shape).toEqual([2 * n, ck.config.numKeyValueHeads, CTX, ck.config.headDim]);
      expect(sb16.io.inputs.some((t) => t.role.kind === "kv_cache")).toBe(false);
      const r16 = await runChain(
        new ReferenceChain({ ...parts16, superblocks: [sb16] }, { precision: "fp16", flushSubnormals: true }),
        g.promptIds,
        steps(),
      );
      expect(r16.nonFinite).toEqual([]);
      expect(r16.tokens).toEqual(fp16Run.tokens);
      report(name, "mlstate vs io fp16 max |Δlogit|", maxDiff(r16, fp16Run.logits).toFixed(4));

      const sb32 = await pkg(
        "mlstate32_sb",
        { kind: "superblocks", first: 0, count: n },
        { ctx: CTX, state: "mlstate", dtype: "fp32" },
      );
      const r32 = await runChain(
        new ReferenceChain({ ...parts32, superblocks: [sb32] }, { precision: "fp32" }),
        g.promptIds,
        steps(),
      );
      expect(r32.tokens).toEqual(fp32Run.tokens);
      report(
        name,
        "mlstate (fp16 KV state) vs io, fp32 program, max |Δlogit|",
        maxDiff(r32, fp32Run.logits).toExponential(2),
      );
    });

    it("attention as the sdpa op: fp32 within 1e-3 of HF and of the matmul form (so is matmul over the joined cache), fp16 greedy tokens, in both KV placements", async () => {
      const all = { kind: "superblocks", first: 0, count: ck.config.superBlocks.length } as const;
      const sdpa32 = await pkg("sdpa32_sb", all, { ctx: CTX, dtype: "fp32", attention: "sdpa" });
      const r32 = await runChain(
        new ReferenceChain({ ...parts32, superblocks: [sdpa32] }, { precision: "fp32" }),
        g.promptIds,
        steps(),
      );
      report(name, "sdpa fp32 max |Δlogit| vs HF / vs matmul form", [
        maxDiff(r32, hfRows).toExponential(2),
        maxDiff(r32, fp32Run.logits).toExponential(2),
      ]);
      expect(maxDiff(r32, hfRows)).toBeLessThanOrEqual(1e-3);
      expect(maxDiff(r32, fp32Run.logits)).toBeLessThanOrEqual(1e-4);
      expect(r32.tokens).toEqual(g.generatedIds);
      // the bench-only form (matmul over the joined cache, costplan's before/after) computes the same
      const joined32 = await pkg("joined32_sb", all, { ctx: CTX, dtype: "fp32", attention: "matmul-joined" });
      const rj = await runChain(
        new ReferenceChain({ ...parts32, superblocks: [joined32] }, { precision: "fp32" }),
        g.promptIds,
        steps(),
      );
      expect(maxDiff(rj, fp32Run.logits)).toBeLessThanOrEqual(1e-4);
      expect(rj.tokens).toEqual(g.generatedIds);
      for (const state of ["io", "mlstate"] as const) {
        const sb = await pkg(`sdpa16_${state}_sb`, all, { ctx: CTX, state, attention: "sdpa" });
        const r = await runChain(
          new ReferenceChain({ ...parts16, superblocks: [sb] }, { precision: "fp16", flushSubnormals: true }),
          g.promptIds,
          steps(),
        );
        expect(r.nonFinite).toEqual([]);
        expect(r.tokens).toEqual(g.generatedIds);
        report(
          name,
          `sdpa fp16 (${state}) vs matmul fp16 max |Δlogit|`,
          maxDiff(r, fp16Run.logits).toFixed(4),
        );
      }
    });

    it("an MLP split into channel pieces (mlpMaxChannels 96): fp32 within 1e-3 of HF, same tokens, 1e-4 of the unsplit chain", async () => {
      const reports: WeightEncodingReport[] = [];
      const all = { kind: "superblocks", first: 0, count: ck.config.superBlocks.length } as const;
      const sb = await pkg("mlpsplit32_sb", all, {
        ctx: CTX,
        dtype: "fp32",
        mlpMaxChannels: 96,
        onWeight: (r) => reports.push(r),
      });
      const F = ck.config.intermediateSize as number;
      const widths = planPieces(F, 96, 8).map((p) => p.rows); // tiny-tied / tiny-gqa: 256 → 88, 88, 80
      expect(widths.length).toBeGreaterThan(1);
      const down = reports.filter((r) => r.tensor === "layers.0.mlp.down_proj.weight");
      expect(down.map((r) => r.shape)).toEqual(widths.map((f) => [ck.config.hiddenSize, f, 1, 1]));
      const gate = reports.filter((r) => r.tensor === "layers.0.mlp.gate_proj.weight");
      expect(gate.map((r) => r.shape[0])).toEqual(widths);
      const r = await runChain(
        new ReferenceChain({ ...parts32, superblocks: [sb] }, { precision: "fp32" }),
        g.promptIds,
        steps(),
      );
      report(
        name,
        "MLP in 3 pieces fp32 max |Δlogit| vs unsplit",
        maxDiff(r, fp32Run.logits).toExponential(2),
      );
      expect(maxDiff(r, hfRows)).toBeLessThanOrEqual(1e-3);
      expect(maxDiff(r, fp32Run.logits)).toBeLessThanOrEqual(1e-4);
      expect(r.tokens).toEqual(g.generatedIds);
    });

    it("lm_head split into pieces, and argmax mode, give the same top-1 as full logits", async () => {
      const V = ck.config.vocabSize;
      const maxRows = Math.ceil(V / 4) + 7; // several uneven-looking pieces
      const splitHead = await pkg(
        "fp32_head_split",
        { kind: "lm_head" },
        { ctx: CTX, dtype: "fp32", lmHeadMaxRows: maxRows },
      );
      const pieces = splitHead.io.lmHead?.pieces ?? [];
      expect(pieces.length).toBeGreaterThan(1);
      expect(pieces.reduce((s, p) => s + p.rows, 0)).toBe(V);
      for (const p of pieces) expect(p.rows).toBeLessThanOrEqual(maxRows);
      const split = await runChain(
        new ReferenceChain({ ...parts32, lmHead: splitHead }, { precision: "fp32" }),
        g.promptIds,
        steps(),
      );
      expect(maxDiff(split, fp32Run.logits)).toBeLessThanOrEqual(1e-6);
      expect(split.tokens).toEqual(fp32Run.tokens);

      const argHead = await pkg(
        "fp16_head_argmax",
        { kind: "lm_head" },
        { ctx: CTX, lmHeadMaxRows: maxRows, argmax: true },
      );
      expect(argHead.io.outputs.map((t) => t.name)).toEqual(["argmax_idx", "argmax_val"]);
      const am = await runChain(
        new ReferenceChain({ ...parts16, lmHead: argHead }, { precision: "fp16", flushSubnormals: true }),
        g.promptIds,
        steps(),
      );
      expect(am.logits).toEqual([]);
      // the top-1 of every step (prompt positions and decode steps) against full logits of the same fp16 program
      expect(am.top1).toEqual(fp16Run.logits.map(argmax));
      expect(am.tokens).toEqual(fp16Run.tokens);
      report(name, "argmax head pieces", pieces.length);
    });

    it(
      "LUT / int8 variants: top-1 agreement and mean KL(HF fp32 ‖ quantized) over the decode steps (no bar)",
      async () => {
        const T = g.promptIds.length;
        /** Teacher-forced on the HF greedy tokens, so that every decode step compares the same context. */
        const measure = async (tag: string, parts: ChainParts, reports: WeightEncodingReport[]) => {
          const r = await runChain(
            new ReferenceChain(parts, { precision: "fp16", flushSubnormals: true }),
            g.promptIds,
            steps(),
            g.generatedIds,
          );
          expect(r.nonFinite).toEqual([]);
          const decode = r.logits.slice(T);
          const agree = decode.filter((l, i) => argmax(l) === argmax(g.decodeLogits[i])).length;
          const kl = decode.reduce((s, l, i) => s + klDivergence(g.decodeLogits[i], l), 0) / decode.length;
          report(
            name,
            `${tag} top-1 agreement / mean KL`,
            `${agree}/${decode.length} / ${kl.toFixed(5)} nats`,
          );
          return { reports, kl, agree };
        };
        const quantized = async (tag: string, quant: BuildOptions["quant"]) => {
          const reports: WeightEncodingReport[] = [];
          const parts = await chain(
            tag,
            { ctx: CTX, quant, onWeight: (r) => reports.push(r), workers: 1 },
            false,
          );
          return measure(tag, parts, reports);
        };
        const fp16 = await measure("fp16 (plain)", parts16, fp16Reports);
        const lut = await quantized("q_lut4body_lut6head", { rules: QUANT_PRESETS.lut4 });
        const lutHead = await quantized("q_lut4head", {
          rules: [{ pattern: "lm_head", quant: { kind: "lut", bits: 4 } }],
        });
        const int8 = await quantized("q_int8body_int8embed", {
          rules: [
            { pattern: "body", quant: { kind: "int8" } },
            { pattern: "embed", quant: { kind: "int8" } },
          ],
        });
        const policy = await quantized("q_default_policy", { rules: DEFAULT_QUANT_RULES });

        // an LUT8 embedding (gather from the expanded table) against HF's embedding output
        const embedLut = await pkg(
          "q_lut8embed",
          { kind: "embed" },
          { ctx: CTX, quant: { rules: [{ pattern: "embed", quant: { kind: "lut", bits: 8 } }] }, workers: 1 },
        );
        const embedInterp = new MilInterpreter(embedLut.model.program, {
          precision: "fp16",
          flushSubnormals: true,
        });
        const embCos = g.promptIds.map((id, t) => {
          const out = embedInterp.run({ input_ids: tensor("i32", [1, 1], Int32Array.of(id)) }).outputs.hidden;
          return cosine(toFloat32(out.dtype, out.data), g.hiddenStates[0][t]);
        });
        report(name, "lut8 embed min cosine vs HF embedding rows", Math.min(...embCos).toFixed(6));
        expect(Math.min(...embCos)).toBeGreaterThan(0.999);

        // every body projection of the LUT4 run is reported with 4-bit indices; LUT6 head pieces with 6
        const isBody = (r: WeightEncodingReport) => r.role !== "lm_head" && r.role !== "embed";
        const isHead = (r: WeightEncodingReport) => r.role === "lm_head";
        const body = lut.reports.filter(isBody);
        const L = ck.config.numHiddenLayers;
        expect(body.length).toBe(((3 * L) / 4) * 5 + (L / 4) * 4 + L * 3); // GDN: qkv z b a out · attention: q k v o · MLP: gate up down
        for (const r of body) expect(r.bits).toBe(4);
        for (const r of lut.reports.filter(isHead)) expect(r.bits).toBe(6);
        // the default policy, tensor by tensor: GDN a/b fp16, every other projection LUT6
        const bitsByRole = new Map<string, Set<number>>();
        for (const r of policy.reports.filter(isBody))
          bitsByRole.set(r.role, (bitsByRole.get(r.role) ?? new Set()).add(r.bits));
        const want: Record<string, number> = {
          "gdn.in_proj_a": 16,
          "gdn.in_proj_b": 16,
          "gdn.in_proj_qkv": 6,
          "gdn.out_proj": 6,
          "gdn.in_proj_z": 6,
          "attn.q_proj": 6,
          "attn.k_proj": 6,
          "attn.v_proj": 6,
          "attn.o_proj": 6,
          "mlp.gate_proj": 6,
          "mlp.up_proj": 6,
          "mlp.down_proj": 6,
        };
        expect(Object.fromEntries([...bitsByRole].map(([k, v]) => [k, [...v]]))).toEqual(
          Object.fromEntries(Object.entries(want).map(([k, v]) => [k, [v]])),
        );
        const meanRel = (rs: WeightEncodingReport[]) => rs.reduce((s, r) => s + r.relative, 0) / rs.length;
        report(
          name,
          "mean relative weight error fp16 / int8 / lut6 head / lut4 body / lut4 head",
          [
            fp16.reports,
            int8.reports.filter(isBody),
            lut.reports.filter(isHead),
            body,
            lutHead.reports.filter(isHead),
          ]
            .map((rs) => meanRel(rs).toExponential(2))
            .join(" / "),
        );
        // coarser codes lose more: fp16 < int8 < LUT6 < LUT4 (per-tensor reconstruction error)
        expect(meanRel(fp16.reports)).toBeLessThan(meanRel(int8.reports.filter(isBody)));
        expect(meanRel(lut.reports.filter(isHead))).toBeLessThan(meanRel(lutHead.reports.filter(isHead)));
        // the policy's finer GDN encodings lose less than uniform LUT4 on those tensors
        const gdnFine = (rs: WeightEncodingReport[]) =>
          rs.filter((r) =>
            ["gdn.in_proj_qkv", "gdn.out_proj", "gdn.in_proj_a", "gdn.in_proj_b"].includes(r.role),
          );
        expect(meanRel(gdnFine(policy.reports))).toBeLessThan(meanRel(gdnFine(lut.reports)));
        expect(fp16.kl).toBeLessThan(lut.kl);
      },
      timeLimit(240_000),
    ); // k-means of tiny-trained's 6 M body weights, three times
  });
}

describe("coremltools", () => {
  it(
    "every package written above passes coremltools validation",
    async (ctx) => {
      ctx.skip(written.length === 0, "no fixtures, no packages written");
      const v = await validateWithCoremltools(written);
      if (!v.available) {
        if (process.env.CI) throw new Error(`coremltools unavailable in CI: ${v.reason}`);
        ctx.skip(`coremltools unavailable: ${v.reason}`);
        return;
      }
      expect(v.verdicts.filter((x) => !x.ok)).toEqual([]);
      expect(v.verdicts).toHaveLength(written.length);
      report(
        "all",
        "packages validated by coremltools",
        `${v.verdicts.length} (coremltools ${v.coremltools})`,
      );
    },
    timeLimit(300_000),
  ); // one Python process loads coremltools and reads every package: minutes on a loaded machine
});

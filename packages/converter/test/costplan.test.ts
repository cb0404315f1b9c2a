/**
 * The fused super-block graph as costplan's static model places it (fixtures/tiny-gqa: the same
 * graph code as every size): no non-ANE op between two ANE ops — 0 graph interruptions — in both
 * KV placements and both attention forms. RoPE's cos/sin are inputs (no gather); with the KV in
 * a state, the write bounds are inputs too (no int32 op), and the KV state takes one slice_update
 * per step. The default conversion of fixtures/tiny-trained (every bucket, decode and prefill, the MTP verify function, both
 * KV placements): 0 ops off the ANE in every super-block function.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { costplan } from "@anemll-qwen35/costplan";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { describe, expect, it } from "vitest";
import { buildComponent } from "../src/graph/index.js";
import { convert } from "../src/index.js";
import { fixtureDir, hasFixture } from "./golden.js";

describe.skipIf(!hasFixture("tiny-gqa"))("costplan on fused super-blocks (fixtures/tiny-gqa)", () => {
  for (const state of ["io", "mlstate"] as const) {
    for (const attention of ["matmul", "sdpa"] as const) {
      it(`${state} KV, ${attention} attention: 0 interruptions, no gather, nothing off the ANE`, async () => {
        await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-gqa"));
        const spec = { kind: "superblocks", first: 0, count: ck.config.superBlocks.length } as const;
        const { model } = await buildComponent(ck, spec, { ctx: 32, state, attention });
        const r = await costplan(model, { native: "off", calibration: "none" });
        const f = r.packages[0].functions[0];
        expect(f.interruptions.count, f.interruptions.timeline).toBe(0);
        // nothing off the ANE: RoPE and (mlstate) the KV write bounds come in as inputs
        expect(f.interruptions.edgeRuns).toBe(0);
        const runtime = f.ops.filter((o) => o.device !== "load");
        expect(runtime.filter((o) => o.device !== "ANE").map((o) => o.name)).toEqual([]);
        const updates = runtime.filter((o) => o.type === "slice_update");
        expect(updates.map((o) => o.device)).toEqual(state === "io" ? [] : ["ANE"]);
        expect(runtime.filter((o) => o.type === "write_state")).toHaveLength(state === "io" ? 0 : 1);
        const attentionOps = runtime.filter(
          (o) => o.type === (attention === "sdpa" ? "scaled_dot_product_attention" : "matmul"),
        );
        expect(attentionOps).toHaveLength((attention === "sdpa" ? 1 : 2) * 2); // two attention layers
        // the matmul form copies no cache: every concat is smaller than cache + new row [1, Hkv, ctx + 1, hd]
        const joined = (32 + 1) * ck.config.numKeyValueHeads * ck.config.headDim * 2;
        const big = runtime.filter((x) => x.type === "concat" && x.bytesWritten.activations >= joined);
        expect(big.map((o) => o.name)).toEqual(
          attention === "matmul" ? [] : ["l3_attn_keys", "l3_attn_values", "l7_attn_keys", "l7_attn_values"],
        );
      });
    }
  }
});

describe.skipIf(!hasFixture("tiny-trained"))(
  "costplan on the default conversion (fixtures/tiny-trained)",
  () => {
    for (const state of ["io", "mlstate"] as const) {
      it(
        `${state} KV: every function of every bucket runs every op on the ANE`,
        async () => {
          const out = join(mkdtempSync(join(tmpdir(), "converter-costplan-")), state);
          const { manifest } = await convert({ model: fixtureDir("tiny-trained"), out, state, workers: 1 });
          expect(manifest.buckets).toEqual([256, 1024, 2048]); // the default, cut to max_position_embeddings
          const r = await costplan(out, { native: "off", calibration: "none" });
          const blocks = r.packages.filter((p) => p.name.startsWith("sb_"));
          expect(blocks.length).toBeGreaterThan(0);
          for (const p of blocks) {
            expect(p.functions.map((f) => f.name).sort()).toEqual([
              "decode_1024",
              "decode_2048",
              "decode_256",
              "prefill_1024",
              "prefill_2048",
              "prefill_256",
              "verify_1024", // the default keeps tiny-trained's MTP head: a verify per bucket
              "verify_2048",
              "verify_256",
            ]);
            for (const f of p.functions) {
              expect(f.summary.cpu + f.summary.gpu, `${p.name} ${f.name}`).toBe(0);
              expect(f.summary.ane, `${p.name} ${f.name}`).toBeGreaterThan(0);
            }
          }
        },
        timeLimit(300_000),
      );
    }
  },
);

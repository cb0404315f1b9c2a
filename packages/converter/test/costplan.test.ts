/**
 * The fused super-block graph as costplan's static model places it (fixtures/tiny-gqa: the same
 * graph code as every size): no non-ANE op between two ANE ops — 0 graph interruptions — in both
 * KV placements and both attention forms. RoPE's cos/sin are inputs (no gather); with the KV in
 * a state, the run-time index work (the write bounds) is one leading edge run, and the KV state
 * takes one slice_update per step.
 */
import { costplan } from "@anemll-qwen35/costplan";
import { Qwen35Checkpoint } from "@anemll-qwen35/ir/checkpoint";
import { describe, expect, it } from "vitest";
import { buildComponent } from "../src/graph/index.js";
import { fixtureDir, hasFixture } from "./golden.js";

describe.skipIf(!hasFixture("tiny-gqa"))("costplan on fused super-blocks (fixtures/tiny-gqa)", () => {
  for (const state of ["io", "mlstate"] as const) {
    for (const attention of ["matmul", "sdpa"] as const) {
      it(`${state} KV, ${attention} attention: 0 interruptions, no gather, index work in one leading edge run`, async () => {
        await using ck = await Qwen35Checkpoint.open(fixtureDir("tiny-gqa"));
        const spec = { kind: "superblocks", first: 0, count: ck.config.superBlocks.length } as const;
        const { model } = await buildComponent(ck, spec, { ctx: 32, state, attention });
        const r = await costplan(model, { native: "off", calibration: "none" });
        const f = r.packages[0].functions[0];
        expect(f.interruptions.count, f.interruptions.timeline).toBe(0);
        // io: nothing off the ANE (RoPE comes in as inputs); mlstate: the write bounds, one leading run
        expect(f.interruptions.edgeRuns).toBe(state === "io" ? 0 : 1);
        const runtime = f.ops.filter((o) => o.device !== "load");
        const off = runtime.filter((o) => o.device !== "ANE");
        // the leading run: everything off the ANE comes before the first ANE op
        expect(runtime.slice(0, off.length)).toEqual(off);
        expect(off.map((o) => o.type).sort()).toEqual(state === "io" ? [] : ["add", "concat", "concat"]);
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

/**
 * handoff: what passing the hidden state from one package to the next costs. k near-empty packages
 * in a chain against one package doing the same k stages; per-step ms of each, and the difference
 * per boundary. On Core ML this is the predict() boundary the reference study found free; on the
 * reference interpreter it is the interpreter's per-call overhead.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { f16BitsToF32, f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import type { LoadedComponent } from "@anemll-qwen35/runtime-ane";
import { aneBackend } from "../backends.js";
import type { ChartSpec } from "../charts.js";
import { expectedAfter, type HandoffPackage, writeHandoffPackages } from "../handoff-packages.js";
import { cacheRoot } from "../models.js";
import { backendNotes, lineChart, lineRows } from "../report.js";
import type { Scenario } from "../scenario.js";
import type { Run } from "../schema.js";
import { metric } from "../stats.js";

async function loadAll(
  backend: ReturnType<typeof aneBackend>["backend"],
  pkgs: readonly HandoffPackage[],
): Promise<LoadedComponent[]> {
  const out: LoadedComponent[] = [];
  for (const p of pkgs) {
    out.push(await backend.load(p.path, { name: p.name, functionName: "main", io: p.io, sha256: p.sha256 }));
  }
  return out;
}

/** One step: x through every loaded package in order. */
async function pass(stages: readonly LoadedComponent[], x: Tensor): Promise<Tensor> {
  let h = x;
  for (const s of stages) h = (await s.predict({ x: h })).y;
  return h;
}

export const handoff: Scenario = {
  name: "handoff",
  question: "What does handing the hidden state from one package to the next cost, per boundary?",
  async run(ctx, p) {
    const { hidden, ks, steps } = p.handoff;
    const dir = join(cacheRoot(), "bench", "handoff");
    await mkdir(dir, { recursive: true });
    const { backend, id } = aneBackend(ctx.ane);
    const runs: Run[] = [];
    const notes: string[] = [];
    const x0 = Float32Array.from({ length: hidden }, (_, j) => ((j % 11) - 5) / 8);
    const input = tensor("f16", [1, 1, hidden], Uint16Array.from(x0, f32ToF16Bits));
    const model = {
      name: `identity-like h${hidden}`,
      source: "generated (MilBuilder: y = x + c per stage)",
      hiddenSize: hidden,
    };
    for (const k of ks) {
      ctx.signal?.throwIfAborted();
      const pkgs = await writeHandoffPackages(dir, hidden, k);
      const layouts = [
        { layout: "chain", stages: await loadAll(backend, pkgs.chain) },
        { layout: "single", stages: await loadAll(backend, [pkgs.single]) },
      ];
      const want = expectedAfter(hidden, k, Float32Array.from(input.data as Uint16Array, f16BitsToF32));
      const medians: Record<string, number> = {};
      for (const { layout, stages } of layouts) {
        // one unmeasured pass (first-call work), and a check that every stage really ran
        const y = await pass(stages, input);
        const got = toFloat32(y.dtype, y.data);
        const err = Math.max(...Array.from(got, (v, j) => Math.abs(v - want[j])));
        if (!(err < 0.05))
          throw new Error(`handoff ${layout} k=${k}: output is off by ${err} (stages did not all run)`);
        const ms: number[] = [];
        for (let s = 0; s < steps; s++) {
          const t = performance.now();
          await pass(stages, input);
          ms.push(performance.now() - t);
        }
        for (const s of stages) s.dispose();
        const m = metric(
          "step_ms",
          "ms",
          ms,
          `one pass through ${layout === "chain" ? `${k} packages` : "1 package"}`,
        );
        medians[layout] = m.summary.median;
        runs.push({
          id: `${id} · ${layout} · k ${k}`,
          backend: id,
          model,
          config: { layout, k, hidden, packages: layout === "chain" ? k : 1, steps },
          metrics: [m],
          notes: [],
        });
      }
      if (k > 1) {
        const per = (medians.chain - medians.single) / (k - 1);
        notes.push(
          `k=${k}: chain ${medians.chain.toFixed(3)} ms vs single ${medians.single.toFixed(3)} ms per step → ${per.toFixed(3)} ms per boundary`,
        );
      }
    }
    return { runs, skipped: [], notes: [...notes, ...backendNotes(runs)] };
  },
  charts(result): ChartSpec[] {
    const runs = result.runs;
    const rows = lineRows(
      runs,
      "step_ms",
      (r) => Number(r.config.k),
      (r) => ({ layout: String(r.config.layout) }),
    );
    const title = `Per-step ms: k one-stage packages vs one k-stage package (hidden ${runs[0]?.config.hidden ?? "?"})`;
    return [
      lineChart("step-ms", title, rows, {
        xTitle: "stages k",
        xType: "ordinal",
        yTitle: "ms per step",
        color: "layout",
      }),
    ];
  },
};

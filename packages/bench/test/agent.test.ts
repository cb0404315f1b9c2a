/**
 * The agent scenario at smoke scale: tiny-trained served by the built CLI, a reduced script (2
 * tools, 3 turns of 24-token tool results, 3 completion tokens), driven by the openai client.
 * Asserts the result's shape and its consistency (cached tokens grow per turn, the two backends
 * see the same prompts, the projection's band holds its estimate), not speed.
 */
import { loadTokenizer } from "@anemll-qwen35/generate";
import { describe, expect, it } from "vitest";
import { fixtureDir, mlxStatus, readResult, runScenario } from "../src/index.js";
import { AGENT_TOOLS, cliPath, toolResult } from "../src/scenarios/agent.js";
import { benchDirs } from "./bench-dirs.js";

const dirs = benchDirs("bench-agent");

describe("bench agent", () => {
  it("scripts 8 tools and tool results of at least the asked token count", async () => {
    expect(AGENT_TOOLS).toHaveLength(8);
    expect(new Set(AGENT_TOOLS.map((t) => t.function.name)).size).toBe(8);
    const tok = await loadTokenizer(fixtureDir("tiny-trained"));
    for (const n of [24, 300]) {
      const text = toolResult(1, n, (s) => tok.encode(s));
      const len = tok.encode(text).length;
      expect(len).toBeGreaterThanOrEqual(n);
      expect(len).toBeLessThan(n + 40); // one scripted line more at most
    }
  });

  it.skipIf(!cliPath())(
    "runs the conversation through serve: per-turn TTFT and cached tokens, decode tok/s, peak RSS, the ANE projection (skipped without the built CLI: pnpm run build)",
    async () => {
      const r = await runScenario("agent", { scale: "smoke", out: dirs.out });
      const back = await readResult(r.file);
      expect(back.scenario).toBe("agent");
      expect(back.status).toBe("ok");
      const served = back.runs.filter((x) => x.config.projection === undefined);
      expect(served.some((x) => x.backend === "ane-reference")).toBe(true);
      if (mlxStatus().available) expect(served.some((x) => x.backend.startsWith("mlx"))).toBe(true);
      else expect(back.skipped.some((s) => /mlx/.test(s.what))).toBe(true);
      const samples = (run: (typeof back.runs)[number], name: string) => {
        const m = run.metrics.find((x) => x.name === name);
        expect(m, `${name} on ${run.id}`).toBeDefined();
        return m!.samples;
      };
      const prompts = served.map((run) => samples(run, "prompt_tokens"));
      for (const run of served) {
        const turns = Number(run.config.turns);
        expect(turns).toBe(3);
        const prompt = samples(run, "prompt_tokens");
        const cached = samples(run, "cached_tokens");
        const fresh = samples(run, "new_tokens");
        expect(samples(run, "ttft_ms")).toHaveLength(turns);
        expect(prompt).toHaveLength(turns);
        expect(cached[0]).toBe(0); // a fresh server has nothing cached
        for (let i = 0; i < turns; i++) {
          expect(fresh[i]).toBe(prompt[i] - cached[i]);
          if (i === 0) continue;
          expect(prompt[i]).toBeGreaterThan(prompt[i - 1]); // each turn adds a call and a result
          expect(cached[i]).toBeGreaterThan(cached[i - 1]); // and the previous prompt is reused
          expect(cached[i]).toBeLessThanOrEqual(prompt[i - 1]);
          expect(cached[i]).toBeGreaterThan(prompt[i - 1] * 0.9);
        }
        for (const n of samples(run, "completion_tokens")) expect(n).toBeLessThanOrEqual(3);
        expect(samples(run, "peak_rss_bytes")[0]).toBeGreaterThan(10e6);
      }
      // the same tokenizer and template on both backends: the same prompts
      for (const p of prompts) expect(p).toEqual(prompts[0]);
      // costplan's projection of the same turns: a band around its estimate
      const proj = back.runs.find((x) => x.config.projection === "costplan");
      expect(proj).toBeDefined();
      const est = samples(proj!, "projected_ttft_ms");
      const lo = samples(proj!, "projected_ttft_ms_low");
      const hi = samples(proj!, "projected_ttft_ms_high");
      expect(est).toHaveLength(3);
      for (let i = 0; i < est.length; i++) {
        expect(lo[i]).toBeLessThanOrEqual(est[i] + 1e-9);
        expect(hi[i]).toBeGreaterThanOrEqual(est[i] - 1e-9);
      }
      // turn 1 prefills the whole prompt, later turns only what is new
      expect(est[0]).toBeGreaterThan(est[1]);
      const [d, dl, dh] = ["", "_low", "_high"].map((s) => samples(proj!, `projected_decode_tok_s${s}`)[0]);
      expect(dl).toBeLessThanOrEqual(d);
      expect(dh).toBeGreaterThanOrEqual(d);
      expect(back.charts.filter((f) => f.endsWith(".svg")).length).toBe(2);
    },
    600_000,
  );
});

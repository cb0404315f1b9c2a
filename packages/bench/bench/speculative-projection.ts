/**
 * costplan's projected ANE decode speed with speculative decoding by the MTP head, for Qwen3.5
 * 0.8B and 9B (their published configs, the converter's default encodings, its package plan),
 * beside the reference study's plain 66.7 / 11.4 tok/s, at the head's measured greedy acceptance:
 * the independent oracle's on held-out text (fixtures/tiny-trained/golden-mtp.json, Ruth) and,
 * when bench/results/speculative-chain.json exists, the chain's own (bench/speculative-chain.ts).
 * Prints the tables and writes bench/results/speculative-projection.json.
 *
 *   pnpm --filter @anemll-qwen35/bench exec tsx bench/speculative-projection.ts
 */
import { existsSync, readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { planComponents, planQuant, resolveQuantSpec, specRules } from "@anemll-qwen35/converter";
import {
  formatSpeculativeProjection,
  projectSpeculativeDecode,
  type SpeculativeAcceptance,
} from "@anemll-qwen35/costplan";
import { parseQwen35Config, publishedConfigJson, type SyntheticSize } from "@anemll-qwen35/ir/checkpoint";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const RESULTS = fileURLToPath(new URL("../results/", import.meta.url));
const STUDY: Record<string, number> = { "0.8b": 66.7, "9b": 11.4 };

function modelBytes(size: SyntheticSize) {
  const config = parseQwen35Config(publishedConfigJson(size));
  const quant = planQuant(config, { rules: specRules(resolveQuantSpec({})) }, { mtp: true });
  const sum = (keep: (canonical: string, layer: number) => boolean) =>
    quant.tensors.reduce((n, t) => (keep(t.canonical, t.layer) ? n + t.bytes : n), 0);
  const lmHeadBytes = quant.tensor("lm_head").bytes;
  const body = sum((c, layer) => !c.startsWith("mtp.") && layer >= 0 && layer < config.numHiddenLayers);
  const gdnLayers = config.layerTypes.filter((t) => t === "linear_attention").length;
  const perLayer =
    config.linearNumValueHeads * config.linearKeyHeadDim * config.linearValueHeadDim +
    config.convDim * (config.linearConvKernelDim - 1);
  const packages = planComponents(config, { fuse: "all", budgetBytes: 1.5e9, quant }).filter(
    (c) => c.kind === "superblocks",
  ).length;
  return {
    name: `Qwen3.5-${size.toUpperCase()}`,
    plainTokS: STUDY[size],
    plainSource: "the reference study's plain ANE decode",
    trunkBytes: body + lmHeadBytes,
    lmHeadBytes,
    headBytes: sum((c) => c.startsWith("mtp.")),
    gdnStateBytes: gdnLayers * perLayer * 2,
    calls: packages + 1,
  };
}

/** Greedy acceptance: the oracle's on Ruth, and the chain's own when measured. */
function acceptance(): Record<string, SpeculativeAcceptance[]> {
  const golden = JSON.parse(readFileSync(join(ROOT, "fixtures/tiny-trained/golden-mtp.json"), "utf8"));
  const oracle = Object.entries(golden.acceptance.gamma as Record<string, { mean_accepted: number }>).map(
    ([g, v]) => ({ gamma: Number(g), meanAccepted: v.mean_accepted }),
  );
  const out: Record<string, SpeculativeAcceptance[]> = { "oracle (Ruth, tiny-trained)": oracle };
  const chainFile = join(RESULTS, "speculative-chain.json");
  if (existsSync(chainFile)) {
    const chain = JSON.parse(readFileSync(chainFile, "utf8")) as {
      rows: { gamma: number; meanAccepted: number }[];
    };
    out["chain (tiny-trained, reference backend)"] = chain.rows.map((r) => ({
      gamma: r.gamma,
      meanAccepted: r.meanAccepted,
    }));
  }
  return out;
}

const report: Record<string, unknown>[] = [];
for (const size of ["0.8b", "9b"] as const) {
  const bytes = modelBytes(size);
  console.log(
    `\n${bytes.name}: trunk ${(bytes.trunkBytes / 1e6).toFixed(0)} MB a step (lm_head ${(bytes.lmHeadBytes / 1e6).toFixed(0)} MB), MTP head ${(bytes.headBytes / 1e6).toFixed(1)} MB, GDN states ${(bytes.gdnStateBytes / 1e6).toFixed(1)} MB a row, ${bytes.calls} predictions a step`,
  );
  for (const [source, rows] of Object.entries(acceptance())) {
    const p = projectSpeculativeDecode(bytes, rows);
    console.log(`-- acceptance: ${source}\n${formatSpeculativeProjection(p)}`);
    report.push({ model: bytes.name, bytes, acceptance: source, projection: p });
  }
}
await mkdir(RESULTS, { recursive: true });
await writeFile(join(RESULTS, "speculative-projection.json"), `${JSON.stringify(report, null, 2)}\n`);
console.log(`\nwrote ${join(RESULTS, "speculative-projection.json")}`);

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { generate, type SamplingOptions } from "@anemll-qwen35/generate";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { statsLine } from "../generation-options.js";
import { openModel } from "../model.js";
import { UsageError } from "../options.js";
import { progressReporter } from "../progress.js";

/** The bundled model: fixtures/tiny-trained, a Qwen3.5 trained on the King James Bible. */
export const BUNDLED_MODEL = "tiny-trained";
export const BUNDLED_ABOUT =
  "a 7.2M-parameter Qwen3.5 trained here on the King James Bible (tools/oracle/train_tiny.py)";

/** Greedy, with a mild repetition penalty: a model this small otherwise falls into loops quickly. */
const DEMO_SAMPLING: SamplingOptions = { temperature: 0, repetitionPenalty: 1.15 };

/** The bundled model's folder: dist/fixture (installed package) or the repository's fixtures/. */
export function bundledFixture(): string | undefined {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const dir of [
    join(here, "fixture", BUNDLED_MODEL),
    join(here, "..", "dist", "fixture", BUNDLED_MODEL),
  ]) {
    if (existsSync(join(dir, "config.json"))) return dir;
  }
  let d = here;
  for (let i = 0; i < 6; i++, d = dirname(d)) {
    const f = join(d, "fixtures", BUNDLED_MODEL);
    if (existsSync(join(f, "config.json"))) return f;
  }
  return undefined;
}

export function registerDemo(program: Command, ctx: Context): void {
  program
    .command("demo")
    .description(
      "convert the bundled tiny Qwen3.5 (trained here on the King James Bible) into a temp folder with the converter's defaults, continue a prompt, print text and tok/s",
    )
    .option("--model <dir>", "a checkpoint to use instead of the bundled tiny model")
    .option("--prompt <text>", "the text to continue", "And God said,")
    .option("--chat", "send the prompt as a user message through the chat template (for chat models)")
    .option("--max-tokens <n>", "tokens to generate", (v) => Number(v), 48)
    .option("--keep", "keep the converted folder")
    .action(async (o) => {
      const out = ctx.output();
      const model = o.model ?? bundledFixture();
      if (!model)
        throw new UsageError("the bundled fixture model was not found; pass --model <checkpoint dir>");
      const work = mkdtempSync(join(tmpdir(), "anemll-qwen35-demo-"));
      const dir = join(work, "model");
      try {
        const bar = progressReporter("convert", ctx.streams.stderr, { quiet: out.json });
        const conv = await convert({
          model,
          out: dir,
          ctx: 256,
          onProgress: (e) => bar.update(e.fraction, e.component ?? e.stage, e.tensor),
        });
        bar.stop();
        out.line(
          `converted ${o.model ? model : BUNDLED_ABOUT} in ${conv.seconds.toFixed(1)} s (body ${conv.manifest.quantization.body}, lm_head ${conv.manifest.quantization.lmHead}) → ${conv.manifest.components.map((c) => c.file).join(", ")}`,
        );
        const loaded = await openModel(
          dir,
          {
            backend: "auto",
            precision: "fp32",
            computeUnits: "cpuAndNeuralEngine",
            contextOverflow: "error",
          },
          out.notice,
        );
        const { model: m, tokenizer } = loaded;
        const describe = loaded.backend.detail;
        try {
          const gen = generate(m, tokenizer, {
            ...(o.chat
              ? { messages: [{ role: "user" as const, content: o.prompt }], enableThinking: false }
              : { prompt: o.prompt }),
            maxTokens: o.maxTokens,
            sampling: DEMO_SAMPLING,
          });
          // a chat prompt is shown on its own line; raw text is continued where it stops
          if (o.chat) out.line(`prompt: ${o.prompt}`);
          else out.write(o.prompt);
          for await (const chunk of gen) if (chunk.type === "text") out.write(chunk.text);
          const r = await gen;
          out.line();
          out.line(statsLine(r.stats, r.finishReason));
          out.line(
            `backend: ${describe}${o.model ? "" : ` · ${BUNDLED_ABOUT}: Bible-like English, not sense`}`,
          );
          out.result({
            prompt: o.prompt,
            convertSeconds: conv.seconds,
            text: r.text,
            stats: r.stats,
            backend: describe,
            folder: o.keep ? dir : undefined,
          });
        } finally {
          await loaded.dispose();
        }
      } finally {
        if (!o.keep) rmSync(work, { recursive: true, force: true });
        else out.notice(`kept ${dir}`);
      }
    });
}

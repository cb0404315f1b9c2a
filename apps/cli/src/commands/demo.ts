import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { convert } from "@anemll-qwen35/converter";
import { generate } from "@anemll-qwen35/generate";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { statsLine } from "../generation-options.js";
import { openModel } from "../model.js";
import { UsageError } from "../options.js";
import { progressBar } from "../progress.js";

/** The tiny fixture model: dist/fixture (installed package) or the repository's fixtures/. */
export function bundledFixture(): string | undefined {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const dir of [join(here, "fixture", "tiny-tied"), join(here, "..", "dist", "fixture", "tiny-tied")]) {
    if (existsSync(join(dir, "config.json"))) return dir;
  }
  let d = here;
  for (let i = 0; i < 6; i++, d = dirname(d)) {
    const f = join(d, "fixtures", "tiny-tied");
    if (existsSync(join(f, "config.json"))) return f;
  }
  return undefined;
}

export function registerDemo(program: Command, ctx: Context): void {
  program
    .command("demo")
    .description(
      "convert the bundled tiny Qwen3.5 model into a temp folder, run a prompt, print text and tok/s",
    )
    .option("--model <dir>", "a checkpoint to use instead of the bundled tiny model")
    .option("--prompt <text>", "the prompt", "Hi!")
    .option("--max-tokens <n>", "tokens to generate", (v) => Number(v), 24)
    .option("--keep", "keep the converted folder")
    .action(async (o) => {
      const out = ctx.output();
      const model = o.model ?? bundledFixture();
      if (!model)
        throw new UsageError("the bundled fixture model was not found; pass --model <checkpoint dir>");
      const work = mkdtempSync(join(tmpdir(), "anemll-qwen35-demo-"));
      const dir = join(work, "model");
      try {
        const bar = progressBar("convert", !out.json && process.stderr.isTTY === true);
        const conv = await convert({
          model,
          out: dir,
          ctx: 256,
          onProgress: (e) => bar.update(e.fraction, e.component ?? e.stage),
        });
        bar.stop();
        out.line(
          `converted ${o.model ? model : "the bundled tiny Qwen3.5 model (random weights)"} in ${conv.seconds.toFixed(1)} s → ${conv.manifest.components.map((c) => c.file).join(", ")}`,
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
          out.line(`prompt: ${o.prompt}`);
          const gen = generate(m, tokenizer, {
            messages: [{ role: "user", content: o.prompt }],
            enableThinking: false,
            maxTokens: o.maxTokens,
          });
          for await (const chunk of gen) if (chunk.type === "text") out.write(chunk.text);
          const r = await gen;
          out.line();
          out.line(statsLine(r.stats, r.finishReason));
          out.line(
            `backend: ${describe}${o.model ? "" : " · the tiny model has random weights, so its text is noise by design"}`,
          );
          out.result({
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

import type { Command } from "commander";
import type { Context } from "../context.js";
import {
  addConstraintOptions,
  addSamplingOptions,
  constraintFrom,
  statsLine,
  streamReply,
} from "../generation-options.js";
import { addModelOptions, type ModelOptions, openModel } from "../model.js";

export function registerRun(program: Command, ctx: Context): void {
  const cmd = program
    .command("run")
    .description(
      "generate text for a prompt with a converted chain or a checkpoint, streaming it, then print a stats line",
    )
    .argument(
      "<model>",
      "a folder written by `convert` (a chain), a Qwen3.5 checkpoint folder (MLX) or hf:owner/name",
    )
    .argument("<prompt...>", "the prompt")
    .option("--raw", "send the prompt as is, without the chat template")
    .option("--system <text>", "system message (chat template)");
  addModelOptions(cmd);
  addSamplingOptions(cmd);
  addConstraintOptions(cmd);
  cmd.action(async (dir: string, words: string[], o) => {
    const out = ctx.output();
    const prompt = words.join(" ");
    const constraint = constraintFrom(o); // before the model loads: a bad file fails fast
    const loaded = await openModel(dir, o as ModelOptions, out.notice);
    const { model, tokenizer } = loaded;
    const describe = loaded.backend.detail;
    const ac = new AbortController();
    const onSigint = () => ac.abort();
    process.once("SIGINT", onSigint);
    try {
      const messages = [
        ...(o.system ? [{ role: "system" as const, content: o.system }] : []),
        { role: "user" as const, content: prompt },
      ];
      const r = await streamReply(ctx, out, model, tokenizer, o, {
        ...(o.raw ? { prompt } : { messages }),
        enableThinking: o.think ? true : o.raw ? undefined : false,
        ...constraint,
        signal: ac.signal,
      });
      out.result({
        text: r.text,
        thinking: r.thinking,
        tokenIds: r.tokenIds,
        toolCalls: r.toolCalls,
        finishReason: r.finishReason,
        stats: r.stats,
        backend: describe,
      });
      if (!out.json) out.notice(`${statsLine(r.stats, r.finishReason)} · ${describe}`);
    } finally {
      process.removeListener("SIGINT", onSigint);
      await loaded.dispose();
    }
  });
}

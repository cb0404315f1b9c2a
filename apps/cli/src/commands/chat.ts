import { createInterface } from "node:readline";
import type { ChatMessage } from "@anemll-qwen35/generate";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { addSamplingOptions, statsLine, streamReply } from "../generation-options.js";
import { addModelOptions, type ModelOptions, openModel } from "../model.js";

const HELP = "commands: /reset (forget the conversation) · /think on|off · /exit";

export function registerChat(program: Command, ctx: Context): void {
  const cmd = program
    .command("chat")
    .description("chat with a converted model (history kept; /reset, /think on|off, /exit)")
    .argument(
      "<model>",
      "a folder written by `convert` (a chain), a Qwen3.5 checkpoint folder (MLX) or hf:owner/name",
    )
    .option("--system <text>", "system message");
  addModelOptions(cmd);
  addSamplingOptions(cmd);
  cmd.action(async (dir: string, o) => {
    const out = ctx.output();
    const loaded = await openModel(dir, o as ModelOptions, out.notice);
    const { model, tokenizer } = loaded;
    const describe = loaded.backend.detail;
    const tty = process.stdin.isTTY === true;
    const rl = createInterface({
      input: process.stdin,
      output: tty ? process.stdout : undefined,
      terminal: tty,
    });
    const history: ChatMessage[] = o.system ? [{ role: "system", content: o.system }] : [];
    let thinking = Boolean(o.think);
    out.notice(`${describe} · context ${model.contextLength} tokens · ${HELP}`);
    try {
      // iterate lines (buffered) rather than rl.question: piped input may arrive all at once
      const prompt = () => tty && process.stdout.write("> ");
      prompt();
      for await (const raw of rl) {
        const line = raw.trim();
        if (line === "") {
          prompt();
          continue;
        }
        if (line === "/exit" || line === "/quit") break;
        if (line === "/reset") {
          history.splice(o.system ? 1 : 0);
          out.notice("conversation cleared");
          prompt();
          continue;
        }
        const think = /^\/think\s+(on|off)$/.exec(line);
        if (think) {
          thinking = think[1] === "on";
          out.notice(`thinking ${thinking ? "on" : "off"}`);
          prompt();
          continue;
        }
        if (line.startsWith("/")) {
          out.notice(`unknown command ${line} — ${HELP}`);
          prompt();
          continue;
        }
        history.push({ role: "user", content: line });
        // the whole conversation is re-rendered each turn, so start from an empty state
        model.reset();
        const r = await streamReply(ctx, out, model, tokenizer, o, {
          messages: history,
          enableThinking: thinking,
        });
        out.notice(statsLine(r.stats, r.finishReason));
        history.push({ role: "assistant", content: r.text, reasoning_content: r.thinking || undefined });
        prompt();
      }
    } finally {
      rl.close();
      await loaded.dispose();
    }
  });
}

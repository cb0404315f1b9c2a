import { AnemllError } from "@anemll-qwen35/core";
import { Command, CommanderError } from "commander";
import { registerBench } from "./commands/bench.js";
import { registerChat } from "./commands/chat.js";
import { registerConvert } from "./commands/convert.js";
import { registerCostplan } from "./commands/costplan.js";
import { registerDemo } from "./commands/demo.js";
import { registerDoctor } from "./commands/doctor.js";
import { registerInspect } from "./commands/inspect.js";
import { registerLaunch } from "./commands/launch.js";
import { registerProfile } from "./commands/profile.js";
import { registerRun } from "./commands/run.js";
import { registerServe } from "./commands/serve.js";
import { registerSynth } from "./commands/synth.js";
import { registerVerify } from "./commands/verify.js";
import type { Context } from "./context.js";
import { UsageError } from "./options.js";
import { makeOutput, type Streams } from "./output.js";

export const VERSION = "0.1.0";

/** Builds the command tree. Separate from process handling so tests can run it in-process. */
export function buildProgram(streams: Streams): Command {
  const program = new Command("anemll-qwen35")
    .description(
      "Qwen 3.5 on the Apple Neural Engine: convert, run, chat, verify, inspect, cost, profile, benchmark, serve",
    )
    .version(VERSION)
    .option("--json", "print one machine-readable JSON document instead of text")
    .showHelpAfterError()
    .exitOverride()
    .configureOutput({
      writeOut: (s) => streams.stdout.write(s),
      writeErr: (s) => streams.stderr.write(s),
    });
  const ctx: Context = { streams, output: () => makeOutput(Boolean(program.opts().json), streams) };
  registerConvert(program, ctx);
  registerRun(program, ctx);
  registerChat(program, ctx);
  registerVerify(program, ctx);
  registerInspect(program, ctx);
  registerSynth(program, ctx);
  registerCostplan(program, ctx);
  registerProfile(program, ctx);
  registerDoctor(program, ctx, VERSION);
  registerDemo(program, ctx);
  registerBench(program, ctx);
  registerServe(program, ctx);
  registerLaunch(program, ctx);
  return program;
}

/** Runs the CLI; resolves to the process exit code (0 ok, 1 failure, 2 usage error). */
export async function run(argv: readonly string[], streams: Streams): Promise<number> {
  const program = buildProgram(streams);
  try {
    await program.parseAsync(argv, { from: "user" });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.exitCode === 0 ? 0 : 2;
    }
    const json = argv.includes("--json");
    const message = err instanceof Error ? err.message : String(err);
    const code = err instanceof AnemllError ? err.code : "E_UNEXPECTED";
    // stopped by the user (Ctrl-C): not an error, and 130 as shells report SIGINT
    const interrupted = code === "E_INTERRUPTED";
    if (json) streams.stdout.write(`${JSON.stringify({ error: { code, message } }, null, 2)}\n`);
    streams.stderr.write(interrupted ? `${message}\n` : `error: ${message}\n`);
    if (!(err instanceof AnemllError) && err instanceof Error && err.stack)
      streams.stderr.write(`${err.stack}\n`);
    // a bad option value is a usage error, whichever layer found it; Ctrl-C is 130, as shells report SIGINT
    if (err instanceof UsageError || (err instanceof AnemllError && err.code === "E_CONVERT_OPTION"))
      return 2;
    return interrupted ? 130 : 1;
  }
}

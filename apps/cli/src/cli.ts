import { run } from "./program.js";

// `anemll-qwen35 inspect … | head`: when the reader goes away, stop quietly as Unix tools do
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code !== "EPIPE") throw err;
    process.exit(process.exitCode ?? 0);
  });
}

process.exitCode = await run(process.argv.slice(2), { stdout: process.stdout, stderr: process.stderr });

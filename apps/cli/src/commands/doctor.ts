import { release } from "node:os";
import { coreMLAvailability } from "@anemll-qwen35/coreml";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import type { Command } from "commander";
import type { Context } from "../context.js";

export interface BackendStatus {
  readonly name: "reference" | "coreml" | "mlx";
  readonly available: boolean;
  readonly detail: string;
}

export function backendStatus(): BackendStatus[] {
  const coreml = coreMLAvailability();
  const mlx = mlxAvailable();
  return [
    {
      name: "reference",
      available: true,
      detail: "MIL interpreter in TypeScript (fp32 and fp16 modes), every OS",
    },
    {
      name: "coreml",
      available: coreml.available,
      detail: coreml.available ? "Core ML on the Apple Neural Engine" : (coreml.reason ?? "unavailable"),
    },
    {
      name: "mlx",
      available: mlx.available,
      detail: mlx.available ? `MLX ${mlx.version}` : (mlx.reason ?? "unavailable"),
    },
  ];
}

export function registerDoctor(program: Command, ctx: Context): void {
  program
    .command("doctor")
    .description("show the platform, Node, and which backends are available (and why not)")
    .action(() => {
      const out = ctx.output();
      const backends = backendStatus();
      const platform = {
        os: process.platform,
        arch: process.arch,
        release: release(),
        node: process.version,
      };
      out.result({ platform, backends });
      out.line(`platform  ${platform.os} ${platform.arch} ${platform.release} · Node ${platform.node}`);
      out.line("backends");
      for (const b of backends) {
        out.line(`  ${b.name.padEnd(10)} ${b.available ? "available  " : "unavailable"}  ${b.detail}`);
      }
    });
}

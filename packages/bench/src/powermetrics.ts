/**
 * powermetrics (macOS, root) as a power sampler: started with the cpu_power, gpu_power and
 * ane_power samplers at a fixed interval while a workload runs, its text output parsed into
 * per-sample milliwatts. Lines look like "CPU Power: 1234 mW", "GPU Power: 56 mW",
 * "ANE Power: 789 mW" and "Combined Power (CPU + GPU + ANE): 2079 mW", one set per sample.
 */
import { spawn } from "node:child_process";

export interface PowerSamples {
  readonly cpuMw: number[];
  readonly gpuMw: number[];
  readonly aneMw: number[];
  readonly combinedMw: number[];
}

const LINES: readonly [keyof PowerSamples, RegExp][] = [
  ["cpuMw", /^CPU Power:\s*([\d.]+)\s*mW/],
  ["gpuMw", /^GPU Power:\s*([\d.]+)\s*mW/],
  ["aneMw", /^ANE Power:\s*([\d.]+)\s*mW/],
  ["combinedMw", /^Combined Power \(CPU \+ GPU \+ ANE\):\s*([\d.]+)\s*mW/],
];

export function parsePowermetrics(text: string): PowerSamples {
  const out: PowerSamples = { cpuMw: [], gpuMw: [], aneMw: [], combinedMw: [] };
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    for (const [key, re] of LINES) {
      const m = re.exec(line);
      if (m) out[key].push(Number(m[1]));
    }
  }
  return out;
}

/** Why power cannot be sampled here, or undefined when it can. */
export function powerUnavailableReason(): string | undefined {
  if (process.platform !== "darwin") {
    return `powermetrics (ANE/GPU/CPU power) exists only on macOS; this machine runs ${process.platform}`;
  }
  if (typeof process.getuid === "function" && process.getuid() !== 0) {
    return "powermetrics needs root: run `sudo anemll-qwen35 bench power`";
  }
  return undefined;
}

/** Samples power every `intervalMs` while `work` runs; returns the samples and work's result. */
export async function samplePower<T>(
  intervalMs: number,
  work: () => Promise<T>,
): Promise<{ power: PowerSamples; result: T }> {
  const child = spawn(
    "powermetrics",
    ["--samplers", "cpu_power,gpu_power,ane_power", "-i", String(intervalMs)],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let text = "";
  child.stdout.on("data", (d) => {
    text += d;
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // let the first sample start before the work does
  await new Promise((r) => setTimeout(r, intervalMs));
  try {
    const result = await work();
    return { power: parsePowermetrics(text), result };
  } finally {
    child.kill("SIGINT");
    await exited;
  }
}

/**
 * Starts the rank processes of the distributed tests and benchmarks on 127.0.0.1 (MLX's ring
 * backend over TCP, as on several Macs) with launchRing, each running rank.ts under tsx.
 */
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { hostsFromList, type LaunchedJob, launchRing } from "../../src/index.js";
import type { RankJob } from "./rank.js";

const RANK_SCRIPT = fileURLToPath(new URL("./rank.ts", import.meta.url));

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen({ host: "127.0.0.1", port }, () => s.close(() => resolve(true)));
  });
}

/** A first port with `n` free ports from it (the ring takes one per rank, counting up). */
export async function freePortBlock(n: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    let ok = true;
    for (let i = 0; i < n && ok; i++) ok = await portFree(base + i);
    if (ok) return base;
  }
  throw new Error("no block of free ports on 127.0.0.1");
}

export interface Ranks {
  readonly job: LaunchedJob;
  /** Every line the ranks printed, as "[rank] line". */
  readonly lines: string[];
}

/** Starts `size` ranks of rank.ts on 127.0.0.1 with `job`; `onLine` sees each line a rank prints. */
export async function startRanks(
  size: number,
  job: RankJob,
  onLine?: (rank: number, line: string, ranks: Ranks) => void,
): Promise<Ranks> {
  const lines: string[] = [];
  const startingPort = await freePortBlock(size);
  const ranks: { job?: LaunchedJob; lines: string[] } = { lines };
  ranks.job = launchRing({
    hostfile: hostsFromList("127.0.0.1", size),
    command: [process.execPath, "--conditions=source", "--import", "tsx", RANK_SCRIPT, JSON.stringify(job)],
    ring: { startingPort },
    graceMs: 5_000,
    onOutput: (rank, _stream, line) => {
      lines.push(`[${rank}] ${line}`);
      onLine?.(rank, line, ranks as Ranks);
    },
  });
  return ranks as Ranks;
}

/** Runs rank.ts as one plain process (no group): the baseline the ranks are compared with. */
export function runAlone(job: RankJob): Promise<{ code: number | null; lines: string[] }> {
  const env = { ...process.env };
  delete env.MLX_RANK;
  delete env.MLX_HOSTFILE;
  const child = spawn(
    process.execPath,
    ["--conditions=source", "--import", "tsx", RANK_SCRIPT, JSON.stringify(job)],
    { env, stdio: ["ignore", "pipe", "pipe"] },
  );
  const lines: string[] = [];
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on("line", (l) => lines.push(`[0] ${l}`));
  }
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, lines })));
}

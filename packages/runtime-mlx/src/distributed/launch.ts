/**
 * Starting the ranks of a ring job, as `mlx.launch --backend ring` does (ml-explore/mlx
 * python/mlx/_distributed_utils/launch.py): one process per host of the hostfile, each with MLX_RANK
 * and MLX_HOSTFILE (a temporary file with the ring's "ip:port" lists, written on that host), the
 * hostfile's `envs`, in the same folder. Hosts named 127.0.0.1 / localhost / ::1 run here; the others
 * through ssh (the same command must exist at the same path there).
 *
 * Every rank's stdin is a pipe from the launcher (launcher-link.ts): its first line is the launch's
 * secret (32 random bytes, new for each launch), which the ranks prove to each other as they join
 * (ring-guard.ts) — out of band, never on a command line. The pipe then stays open, and a rank whose
 * launcher is gone, however it ended, reads end-of-file and stops.
 *
 * Local ranks run in process groups of their own, so that a Ctrl-C in the terminal reaches only the
 * launcher, which decides whom to tell (see LaunchedJob.stop and the CLI's launch command); when the
 * launcher's process exits, the ranks still running are killed (and if it is killed, they stop on
 * their own, above).
 *
 * What happens when a rank ends is chosen for serving: when rank 0 ends, the others get `graceMs` to
 * follow (rank 0 tells them to stop) and are then killed; when another rank ends, the remaining
 * ranks after 0 are stopped too (the ring is broken) but rank 0 runs on — it notices the lost rank
 * within a bounded time, marks the model unavailable and keeps serving its other models. (A rank
 * that ends cleanly — rank 0 told it to — stops nobody.)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { type Hostfile, type RingOptions, ringAddresses } from "./hostfile.js";
import { LAUNCH_CHANNEL_ENV } from "./launcher-link.js";

export interface LaunchOptions {
  readonly hostfile: Hostfile;
  /** The command every rank runs (argv; the first entry is the program). */
  readonly command: readonly string[];
  readonly ring?: RingOptions;
  /** Extra environment for every rank (after the hostfile's `envs`). */
  readonly env?: Readonly<Record<string, string>>;
  /** Working folder of every rank (default: this one). */
  readonly cwd?: string;
  /** The ssh program and its options for remote hosts (default ["ssh"]). */
  readonly ssh?: readonly string[];
  /** Each line a rank prints. */
  readonly onOutput?: (rank: number, stream: "stdout" | "stderr", line: string) => void;
  /** A rank ended (code, or the signal that ended it). */
  readonly onExit?: (rank: number, exit: RankExit) => void;
  /** How long the other ranks may take to end after rank 0 did (default 10 s). */
  readonly graceMs?: number;
}

export interface RankExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface LaunchedRank {
  readonly rank: number;
  readonly host: string;
  readonly remote: boolean;
  /** The local process (for a remote rank: its ssh client). */
  readonly process: ChildProcess;
  readonly exited: Promise<RankExit>;
}

export interface LaunchedJob {
  readonly ranks: readonly LaunchedRank[];
  /** Every rank ended; resolves with rank 0's exit. */
  readonly done: Promise<RankExit>;
  /** Asks every rank to stop (SIGTERM), then kills those still running after `graceMs`. */
  stop(): void;
}

const LOCAL = new Set(["127.0.0.1", "localhost", "::1"]);

/** `'a b'` → `'a b'` quoted for sh. */
const shq = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

/** Starts one process per host; see the module comment for what happens when ranks end. */
export function launchRing(o: LaunchOptions): LaunchedJob {
  const addresses = ringAddresses(o.hostfile, o.ring);
  const ringJson = JSON.stringify(addresses);
  const secret = `${randomBytes(32).toString("hex")}\n`;
  const graceMs = o.graceMs ?? 10_000;
  const cwd = o.cwd ?? process.cwd();
  const envs: Record<string, string> = {};
  for (const e of o.hostfile.envs) {
    const at = e.indexOf("=");
    envs[e.slice(0, at)] = e.slice(at + 1);
  }
  Object.assign(envs, o.env);
  const tmp = mkdtempSync(join(tmpdir(), "anemll-launch-"));
  const localHostfile = join(tmp, "ring.json");
  writeFileSync(localHostfile, ringJson);

  const killers: (() => void)[] = [];
  const ranks: LaunchedRank[] = o.hostfile.hosts.map((host, rank) => {
    const remote = !LOCAL.has(host.ssh);
    let child: ChildProcess;
    let remotePid: string | undefined;
    if (!remote) {
      child = spawn(o.command[0], o.command.slice(1), {
        cwd,
        env: {
          ...process.env,
          ...envs,
          MLX_RANK: String(rank),
          MLX_HOSTFILE: localHostfile,
          [LAUNCH_CHANNEL_ENV]: "stdin",
        },
        stdio: ["pipe", "pipe", "pipe"],
        detached: true,
      });
    } else {
      // Written on that host: the ring file, then the rank replaces the shell (so $$ is its pid).
      const script = [
        `cd ${shq(cwd)} || exit 1`,
        ...Object.entries(envs).map(([k, v]) => `export ${k}=${shq(v)}`),
        "f=$(mktemp) || exit 1",
        `printf '%s' ${shq(ringJson)} > "$f"`,
        `export MLX_HOSTFILE="$f" MLX_RANK=${rank} ${LAUNCH_CHANNEL_ENV}=stdin`,
        'echo "ANEMLL_RANK_PID=$$"',
        `exec ${o.command.map(shq).join(" ")}`,
      ].join("; ");
      const ssh = o.ssh ?? ["ssh"];
      // stdin stays the ssh session's: the rank reads the secret from it, and its end when we are gone
      child = spawn(ssh[0], [...ssh.slice(1), host.ssh, script], { stdio: ["pipe", "pipe", "pipe"] });
    }
    child.stdin!.on("error", () => {}); // a rank that ended closes its end; its exit says the rest
    child.stdin!.write(secret);
    const lines = (stream: "stdout" | "stderr") => {
      const src = stream === "stdout" ? child.stdout! : child.stderr!;
      createInterface({ input: src, crlfDelay: Number.POSITIVE_INFINITY }).on("line", (line) => {
        if (remote && stream === "stdout" && remotePid === undefined && line.startsWith("ANEMLL_RANK_PID=")) {
          remotePid = line.slice("ANEMLL_RANK_PID=".length);
          return;
        }
        o.onOutput?.(rank, stream, line);
      });
    };
    lines("stdout");
    lines("stderr");
    const exited = new Promise<RankExit>((resolve) => {
      child.on("error", (err) => {
        o.onOutput?.(rank, "stderr", `could not start: ${err.message}`);
        resolve({ code: 127, signal: null });
      });
      child.on("exit", (code, signal) => resolve({ code, signal }));
    });
    killers[rank] = () => {
      if (remote && remotePid) {
        const ssh = o.ssh ?? ["ssh"];
        spawn(ssh[0], [...ssh.slice(1), host.ssh, `kill -TERM ${remotePid} 2>/dev/null`], {
          stdio: "ignore",
        });
      }
      child.kill("SIGTERM");
    };
    return { rank, host: host.ssh, remote, process: child, exited };
  });

  const running = (r: LaunchedRank) => r.process.exitCode === null && r.process.signalCode === null;
  let stopping = false;
  const stopRanks = (which: (r: LaunchedRank) => boolean) => {
    for (const r of ranks) if (which(r) && running(r)) killers[r.rank]();
    const hard = setTimeout(() => {
      for (const r of ranks) if (which(r) && running(r)) r.process.kill("SIGKILL");
    }, graceMs);
    hard.unref();
  };
  for (const r of ranks) {
    r.exited.then((exit) => {
      o.onExit?.(r.rank, exit);
      if (r.rank === 0) {
        // rank 0 told the others to stop; those still running after the grace period are ended
        setTimeout(() => stopRanks(() => true), graceMs).unref();
      } else if (!stopping && (exit.code !== 0 || exit.signal)) {
        stopRanks((x) => x.rank !== 0);
      }
    });
  }
  const killOnExit = () => {
    for (const r of ranks) if (running(r)) r.process.kill("SIGKILL");
    rmSync(tmp, { recursive: true, force: true });
  };
  process.once("exit", killOnExit);
  const done = Promise.all(ranks.map((r) => r.exited)).then((exits) => {
    process.removeListener("exit", killOnExit);
    rmSync(tmp, { recursive: true, force: true });
    return exits[0];
  });
  return {
    ranks,
    done,
    stop() {
      stopping = true;
      stopRanks(() => true);
    },
  };
}

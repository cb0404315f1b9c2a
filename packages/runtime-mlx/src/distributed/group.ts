/**
 * A process group from MLX's distributed layer (mlx/distributed): MLX's own backends make it and
 * carry the tensors; this wraps them with what a server needs on top — bounded waits and errors that
 * say which rank is where.
 *
 * The ring backend (TCP between neighbours, the one MLX's launcher uses on Macs) reads MLX_RANK and
 * MLX_HOSTFILE (the per-rank "ip:port" lists; see hostfile.ts). Rank r accepts rank r-1 and connects
 * to rank r+1; send/recv only reach those two neighbours. Joining has no deadline in MLX (accept
 * waits forever), so it runs off the JS thread under a timeout of ours. Ranks started by
 * `anemll-qwen35 launch` hold the launch's secret: they join through a RingGuard (ring-guard.ts),
 * which lets only ranks that prove it reach MLX.
 *
 * The group's work runs on streams of its own: a receive from a peer that is gone blocks only them,
 * never the default stream other models in the process use.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join as joinPath } from "node:path";
import { DistributedError } from "../errors.js";
import { type Dtype, type MxArray, native } from "../native.js";
import { readRingHostfile, splitAddress } from "./hostfile.js";
import { attachToLauncher } from "./launcher-link.js";
import { RingGuard } from "./ring-guard.js";

export type DistributedBackend = "ring" | "mpi";

export interface JoinOptions {
  /** MLX backend (default "ring"; "mpi" needs an MPI library and mpirun's environment). */
  readonly backend?: DistributedBackend;
  /** Give up when the group has not formed by then (default 60 s). */
  readonly timeoutMs?: number;
  /** Sets MLX_RANK for the ring backend (default: the environment's, as the launcher sets it). */
  readonly rank?: number;
  /** Sets MLX_HOSTFILE for the ring backend (default: the environment's). */
  readonly hostfile?: string;
  /**
   * The secret the ranks prove to each other (ring backend; 32 bytes): default, the one the
   * launcher handed over on stdin (attachToLauncher). `false`, or a process started otherwise, joins
   * as MLX does: unauthenticated.
   */
  readonly secret?: Buffer | false;
}

export const DEFAULT_JOIN_TIMEOUT_MS = 60_000;

/** This process's rank when it was started as one rank of a group (MLX_RANK and MLX_HOSTFILE set). */
export function launchedRank(): number | undefined {
  const rank = process.env.MLX_RANK;
  if (rank === undefined || !process.env.MLX_HOSTFILE) return undefined;
  const n = Number(rank);
  return Number.isInteger(n) && n >= 0 ? n : undefined;
}

interface Streams {
  readonly cpu: number;
  readonly gpu: number | undefined;
}

/** The joined group. One per process (MLX keeps one per backend). */
export class DistributedGroup {
  private readonly streams: Streams;
  private readonly ringPorts: readonly number[];

  constructor(
    readonly rank: number,
    readonly size: number,
    readonly backend: DistributedBackend,
    /** Per rank, the addresses it listens on (ring backend), to name peers in messages. */
    readonly addresses: readonly (readonly string[])[] | undefined,
    /** The guard the ring joined through: held for as long as the group (its thread relays the ring). */
    private readonly guard?: RingGuard,
  ) {
    // the ports MLX accepted the previous rank on: its own, or behind the guard, loopback ones
    this.ringPorts = guard?.mlxPorts ?? (addresses?.[rank] ?? []).map((a) => splitAddress(a).port);
    const n = native();
    this.streams = {
      cpu: n.newStream("cpu"),
      gpu: n.defaultDevice() === "gpu" ? n.newStream("gpu") : undefined,
    };
  }

  /**
   * Resolves once what this rank has sent has left the process's hands (behind a RingGuard the bytes
   * pass through a relay thread): call it before ending right after a send.
   */
  async flush(): Promise<void> {
    await this.guard?.flush();
  }

  /** Connections to this rank's ring addresses refused for not proving the launch's secret, and why. */
  get refused(): readonly string[] {
    return this.guard?.refused ?? [];
  }

  /** The next rank around the ring, and the previous one. */
  get next(): number {
    return (this.rank + 1) % this.size;
  }
  get previous(): number {
    return (this.rank + this.size - 1) % this.size;
  }

  /** "rank 2 (10.0.0.3:32325)". */
  describe(rank: number): string {
    const at = this.addresses?.[rank];
    return at ? `rank ${rank} (${at.join(", ")})` : `rank ${rank}`;
  }

  /** Builds `fn`'s ops on the group's streams (synchronously; the JS thread's defaults come back after). */
  run<T>(fn: () => T): T {
    const n = native();
    const cpu = n.defaultStream("cpu");
    const gpu = this.streams.gpu === undefined ? undefined : n.defaultStream("gpu");
    n.setDefaultStream(this.streams.cpu, "cpu");
    if (this.streams.gpu !== undefined) n.setDefaultStream(this.streams.gpu, "gpu");
    try {
      return fn();
    } finally {
      n.setDefaultStream(cpu, "cpu");
      if (gpu !== undefined) n.setDefaultStream(gpu, "gpu");
    }
  }

  send(x: MxArray, dst: number): MxArray {
    return this.run(() => native().distributedSend(x, dst));
  }

  recv(shape: number[], dtype: Dtype, src: number): MxArray {
    return this.run(() => native().distributedRecv(shape, dtype, src));
  }

  allSum(x: MxArray): MxArray {
    return this.run(() => native().distributedAllSum(x));
  }

  allGather(x: MxArray): MxArray {
    return this.run(() => native().distributedAllGather(x));
  }

  /** Starts computing `arrays` now (work reaches each stream in call order: a send before a later receive). */
  schedule(arrays: MxArray[]): void {
    native().schedule(arrays);
  }

  /**
   * Computes `arrays`; rejects with DistributedError E_MLX_DIST_PEER when MLX reports a lost peer
   * or nothing came within `timeoutMs` (no timeout: wait as long as it takes). The wait itself never
   * keeps the process alive; its timer does, until it settles.
   */
  wait(arrays: MxArray[], o: { timeoutMs?: number; what: string }): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const started = performance.now();
      const timer =
        o.timeoutMs === undefined
          ? setInterval(() => {}, 2 ** 30)
          : setTimeout(() => {
              reject(
                new DistributedError(
                  "E_MLX_DIST_PEER",
                  `${o.what}: no answer from the other ranks in ${seconds(o.timeoutMs!)} ` +
                    `(rank ${this.rank} waits for ${this.describe(this.previous)}); a rank is stuck or its machine is unreachable`,
                ),
              );
            }, o.timeoutMs);
      native()
        .evalDetached(arrays)
        .then(
          () => {
            clearTimeout(timer);
            resolve();
          },
          (cause: Error) => {
            clearTimeout(timer);
            reject(this.peerError(o.what, cause, performance.now() - started));
          },
        );
    });
  }

  /**
   * Resolves once the previous rank has sent something (or closed its connection), without using a
   * CPU meanwhile: MLX's ring worker polls in a loop while a receive is pending, so a rank waiting
   * for the next step posts its receive only after this. Resolves at once where the sockets are not
   * found (another backend): the receive then waits MLX's way.
   */
  async waitForData(): Promise<void> {
    const ports = [...this.ringPorts];
    if (ports.length === 0) return;
    const alive = setInterval(() => {}, 2 ** 30); // the native wait does not hold the process
    try {
      while ((await native().distributedWaitReadable(ports, 1_000)) === false);
    } finally {
      clearInterval(alive);
    }
  }

  /** An MLX failure while talking to the other ranks, as a DistributedError that names them. */
  peerError(what: string, cause: Error, afterMs?: number): DistributedError {
    const lost = /\[ring\]|connection|peer/i.test(cause.message);
    const after = afterMs === undefined ? "" : ` after ${(afterMs / 1000).toFixed(1)} s`;
    return new DistributedError(
      "E_MLX_DIST_PEER",
      `${what}: ${lost ? "lost a rank" : "failed"}${after} (rank ${this.rank} talks to ${this.describe(this.previous)} ` +
        `and ${this.describe(this.next)}): ${cause.message}`,
      { cause },
    );
  }
}

/** 1500 → "1.5 s", 60000 → "60 s". */
const seconds = (ms: number) => `${Number((ms / 1000).toFixed(1))} s`;

let joined: Promise<DistributedGroup> | undefined;

/**
 * Joins the group this process was started in (MLX_RANK + MLX_HOSTFILE for the ring backend, as
 * `anemll-qwen35 launch` and `mlx.launch` set them). Resolves once every neighbour is connected;
 * rejects with DistributedError (E_MLX_DIST_SETUP: cannot start; E_MLX_DIST_JOIN: the group did
 * not form in time, or MLX refused) — never hangs past `timeoutMs`. Later calls return the same group.
 */
export function joinGroup(o: JoinOptions = {}): Promise<DistributedGroup> {
  joined ??= join(o);
  return joined;
}

async function join(o: JoinOptions): Promise<DistributedGroup> {
  const backend = o.backend ?? "ring";
  const n = native();
  if (!n.distributedAvailable(backend)) {
    throw new DistributedError(
      "E_MLX_DIST_SETUP",
      `this MLX build (${n.mlxVersion}) has no "${backend}" distributed backend`,
    );
  }
  if (o.rank !== undefined) process.env.MLX_RANK = String(o.rank);
  if (o.hostfile !== undefined) process.env.MLX_HOSTFILE = o.hostfile;
  let addresses: string[][] | undefined;
  let rank = -1;
  if (backend === "ring") {
    rank = launchedRank() ?? -1;
    if (rank < 0) {
      throw new DistributedError(
        "E_MLX_DIST_SETUP",
        `the ring backend needs MLX_RANK and MLX_HOSTFILE (got MLX_RANK="${process.env.MLX_RANK ?? ""}", ` +
          `MLX_HOSTFILE="${process.env.MLX_HOSTFILE ?? ""}"): start the ranks with \`anemll-qwen35 launch --hosts hosts.json -- ...\``,
      );
    }
    addresses = readRingHostfile(process.env.MLX_HOSTFILE!);
    if (rank >= addresses.length) {
      throw new DistributedError(
        "E_MLX_DIST_SETUP",
        `MLX_RANK=${rank} but ${process.env.MLX_HOSTFILE} lists ${addresses.length} rank(s)`,
      );
    }
  }
  const timeoutMs = o.timeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS;
  const publicHostfile = process.env.MLX_HOSTFILE;
  const secret =
    backend !== "ring" ? undefined : o.secret === undefined ? await attachToLauncher() : o.secret;
  let guard: RingGuard | undefined;
  let guardDir: string | undefined;
  if (secret && addresses && addresses.length > 1) {
    // MLX joins through the guard: its hostfile names the guard's loopback ports, not the ring's
    guard = await RingGuard.start({ rank, addresses, secret });
    guardDir = mkdtempSync(joinPath(tmpdir(), "anemll-ring-"));
    const file = joinPath(guardDir, "ring.json");
    writeFileSync(file, JSON.stringify(guard.mlxAddresses), { mode: 0o600 });
    process.env.MLX_HOSTFILE = file;
  }
  const init = n.distributedInit(backend);
  const joined = guard ? guard.join(init).then(() => init) : init;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      joined.catch(() => {}); // it ends later (or never); nobody waits for it any more
      guard?.close();
      if (addresses) unblockAccept(guard ? guard.mlxAddresses[rank] : addresses[rank]);
      reject(new DistributedError("E_MLX_DIST_JOIN", joinTimeoutMessage(rank, addresses, timeoutMs, guard)));
    }, timeoutMs);
  });
  let info: { rank: number; size: number };
  try {
    info = await Promise.race([joined, timeout]);
  } catch (cause) {
    guard?.close();
    if (cause instanceof DistributedError) throw cause;
    throw new DistributedError(
      "E_MLX_DIST_JOIN",
      `rank ${rank} could not join the ${backend} group: ${(cause as Error).message}` +
        (addresses ? ` (hostfile ${publicHostfile}: ${JSON.stringify(addresses)})` : ""),
      { cause },
    );
  } finally {
    clearTimeout(timer);
    if (guardDir) {
      process.env.MLX_HOSTFILE = publicHostfile;
      rmSync(guardDir, { recursive: true, force: true });
    }
  }
  return new DistributedGroup(info.rank, info.size, backend, addresses, guard);
}

function joinTimeoutMessage(
  rank: number,
  addresses: string[][] | undefined,
  ms: number,
  guard: RingGuard | undefined,
): string {
  const s = seconds(ms);
  if (!addresses) return `the distributed group did not form within ${s}`;
  const size = addresses.length;
  const left = (rank + size - 1) % size;
  const right = (rank + 1) % size;
  const refused = guard?.refused.length
    ? `; refused ${guard.refused.length} connection(s) that did not prove the launch's secret (${guard.refused.slice(0, 3).join("; ")})`
    : "";
  return (
    `rank ${rank} of ${size}: the ring did not form within ${s}: it listens on ${addresses[rank].join(", ")} ` +
    `for rank ${left} and connects to rank ${right} at ${addresses[right].join(", ")}${refused}; ` +
    "check that every rank was started by the same launch (see the launcher's log) and that these addresses are reachable"
  );
}

/**
 * MLX's ring accept() has no deadline: after a join timeout, connect to our own listening addresses
 * so that the joining thread ends instead of waiting for a peer forever. (MLX then fails to reach the
 * other neighbour, or makes a group nobody uses.)
 */
function unblockAccept(own: readonly string[]): void {
  const deadline = Date.now() + 10_000;
  const poke = (i: number) => {
    if (i >= own.length || Date.now() > deadline) return;
    const { host, port } = splitAddress(own[i]);
    const socket = connect({ host, port });
    socket.unref();
    socket.on("connect", () => {
      socket.destroy();
      poke(i + 1);
    });
    socket.on("error", () => {
      socket.destroy();
      setTimeout(() => poke(i), 200).unref();
    });
  };
  poke(0);
}

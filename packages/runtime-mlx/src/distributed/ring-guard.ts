/**
 * Ranks that talk only to each other. MLX's ring backend joins with plain TCP: each rank listens on
 * its addresses and takes the first connection on each as its previous rank (ring.cpp's
 * accept_connections), with no handshake — so anyone who connects first becomes a rank, and one
 * stranger connecting during the join keeps the ring from forming. MLX's join cannot be changed from
 * here, so MLX is never exposed: it listens and connects on 127.0.0.1 only, to this guard, and the
 * guard holds the ring's public addresses.
 *
 * - Incoming (from the previous rank): the guard listens on this rank's addresses. Each connection
 *   must prove, within HANDSHAKE_MS, that it holds the launch's secret; strangers are dropped (and
 *   counted) without disturbing the others, and the first that proves it is relayed to MLX's
 *   private listening port — which the guard connected to first, so that MLX's one accept is its.
 * - Outgoing (to the next rank): MLX connects to a loopback port of the guard, which connects to the
 *   next rank's address (again and again until it answers), proves the secret and checks the answer.
 *
 * The proof is mutual HMAC-SHA256 challenge-response over fresh nonces from both sides, bound to the
 * pair of ranks and the connection's index, so that it cannot be replayed or reflected. The sockets
 * live in a worker thread (ring-guard-worker.js): MLX can block this thread while the bytes it
 * waits for pass through the relay.
 *
 * What it does not do: the traffic after the handshake is neither encrypted nor authenticated per
 * message (whoever can inject into an established TCP connection can still tamper with it); and the
 * loopback hop between MLX and the guard is open for the instant of the join to any process on the
 * same machine — a process that takes MLX's port fails the join, it cannot join in its place.
 */
import { Worker } from "node:worker_threads";
import { DistributedError } from "../errors.js";

export interface RingGuardOptions {
  readonly rank: number;
  /** The ring's public addresses, per rank ("ip:port", as in MLX_HOSTFILE). */
  readonly addresses: readonly (readonly string[])[];
  /** The launch's shared secret (the HMAC key). */
  readonly secret: Buffer;
}

type FromWorker =
  | { listening: true; mlxAddresses: string[][]; mlxPorts: number[] }
  | { setupFailed: true; message: string }
  | { refused: string }
  | { joined: true }
  | { failed: true; message: string }
  | { flushed: true };

/** One rank's guard (see the module comment). It never keeps the process alive. */
export class RingGuard {
  /** Connections refused because they did not prove the secret, with why ("10.0.0.9:5123 on …: …"). */
  readonly refused: string[] = [];
  private outcome: Promise<void>;

  private constructor(
    private readonly worker: Worker,
    /** What MLX gets as MLX_HOSTFILE: the guard's loopback ports and MLX's own listening ones. */
    readonly mlxAddresses: string[][],
    /** The loopback ports MLX accepts the previous rank on (where its incoming ring sockets are). */
    readonly mlxPorts: readonly number[],
  ) {
    this.outcome = new Promise((resolve, reject) => {
      worker.on("message", (m: FromWorker) => {
        if ("refused" in m) this.refused.push(m.refused);
        else if ("joined" in m) resolve();
        else if ("failed" in m) reject(new Error(m.message));
      });
      worker.on("error", reject);
      worker.on("exit", () => reject(new Error("the guard was closed")));
    });
    this.outcome.catch(() => {});
    worker.unref(); // after the listeners: adding one refs the worker again
  }

  /** Binds the ring's public addresses and the loopback ones; DistributedError (E_MLX_DIST_SETUP) when it cannot. */
  static async start(o: RingGuardOptions): Promise<RingGuard> {
    const worker = new Worker(new URL("./ring-guard-worker.js", import.meta.url), {
      workerData: { rank: o.rank, addresses: o.addresses, secret: new Uint8Array(o.secret) },
    });
    const first = await new Promise<FromWorker>((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    }).catch((cause: Error) => {
      throw new DistributedError("E_MLX_DIST_SETUP", `the ring guard did not start: ${cause.message}`, {
        cause,
      });
    });
    if (!("listening" in first)) {
      await worker.terminate();
      throw new DistributedError(
        "E_MLX_DIST_SETUP",
        "setupFailed" in first ? first.message : "the ring guard did not start",
      );
    }
    return new RingGuard(worker, first.mlxAddresses, first.mlxPorts);
  }

  /**
   * Lets the guard connect to MLX's listening ports (call as MLX starts joining, with its join), and
   * resolves when every connection in both directions is proven and relayed; rejects when MLX's
   * join or the guard fails. Nothing is relayed before MLX's join succeeded.
   */
  async join(mlxJoined: Promise<unknown>): Promise<void> {
    this.worker.postMessage("mlx-joining");
    await Promise.race([mlxJoined, this.outcome]);
    this.worker.postMessage("mlx-joined");
    await this.outcome;
  }

  /**
   * Resolves once what MLX has sent so far has left the guard (call before a rank ends right after
   * a send: bytes still in the relay would be lost with the process).
   */
  flush(): Promise<void> {
    return new Promise((resolve) => {
      const onMessage = (m: FromWorker) => {
        if (!("flushed" in m)) return;
        this.worker.off("message", onMessage);
        this.worker.unref();
        resolve();
      };
      this.worker.on("message", onMessage);
      this.worker.ref(); // until it answers
      this.worker.postMessage("flush");
    });
  }

  /** Closes every listener and connection (MLX's ring sockets then fail: the group is unusable). */
  close(): void {
    this.worker.postMessage("close");
  }
}

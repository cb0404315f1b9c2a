/**
 * A rank's link to the launcher that started it (launchRing): its stdin is a pipe from the launcher.
 * The first line is the launch's secret, which the ranks prove to each other when they join (see
 * ring-guard.ts) — handed over out of band, never on a command line or in a file another rank could
 * read. After it the pipe stays open and silent; when the launcher is gone, however it ended
 * (SIGKILL included: the kernel closes its end), the rank reads end-of-file and stops: SIGTERM to
 * itself (a server drains), then exit after STOP_GRACE_MS. A remote rank's stdin is its ssh
 * session's, which ends as well when the launcher (or the ssh client) dies.
 */
import { DistributedError } from "../errors.js";

/** Set by launchRing in every rank's environment: the secret and the launcher's liveness come on stdin. */
export const LAUNCH_CHANNEL_ENV = "ANEMLL_LAUNCH_CHANNEL";

/** After SIGTERM, how long a rank whose launcher is gone may take to stop before it exits anyway. */
export const STOP_GRACE_MS = 10_000;

/** How long the launcher may take to hand over the secret (it writes it as it starts the rank). */
const SECRET_TIMEOUT_MS = 30_000;

let linked: Promise<Buffer | undefined> | undefined;

/**
 * For a process started by launchRing (LAUNCH_CHANNEL_ENV set): reads the launch's secret from stdin
 * and from then on stops this process when the launcher is gone; undefined (and nothing watched)
 * otherwise. Rejects with DistributedError (E_MLX_DIST_SETUP) when stdin gives no secret. Call it
 * as early as possible (serve does at start); joinGroup calls it too. Later calls return the same.
 */
export function attachToLauncher(): Promise<Buffer | undefined> {
  linked ??= process.env[LAUNCH_CHANNEL_ENV] === "stdin" ? readSecret() : Promise.resolve(undefined);
  return linked;
}

function readSecret(): Promise<Buffer> {
  const stdin = process.stdin;
  return new Promise((resolve, reject) => {
    let text = "";
    let secret: Buffer | undefined;
    const timer = setTimeout(() => {
      reject(
        new DistributedError(
          "E_MLX_DIST_SETUP",
          `${LAUNCH_CHANNEL_ENV}=stdin, but no launch secret came on stdin within ${SECRET_TIMEOUT_MS / 1000} s: start the ranks with \`anemll-qwen35 launch\``,
        ),
      );
    }, SECRET_TIMEOUT_MS);
    const gone = () => {
      clearTimeout(timer);
      if (!secret) {
        reject(
          new DistributedError(
            "E_MLX_DIST_SETUP",
            "the launcher closed stdin before it sent the launch secret",
          ),
        );
      }
      launcherGone();
    };
    stdin.on("data", (chunk: Buffer) => {
      if (secret) return; // nothing else is sent
      text += chunk.toString("utf8");
      const end = text.indexOf("\n");
      if (end < 0) return;
      const line = text.slice(0, end).trim();
      if (!/^[0-9a-f]{64}$/.test(line)) {
        clearTimeout(timer);
        reject(new DistributedError("E_MLX_DIST_SETUP", "the first line of stdin is not a launch secret"));
        return;
      }
      secret = Buffer.from(line, "hex");
      clearTimeout(timer);
      // from now on stdin only tells whether the launcher lives; it must not keep this process alive
      (stdin as { unref?: () => void }).unref?.();
      resolve(secret);
    });
    stdin.once("end", gone);
    stdin.once("error", gone);
  });
}

function launcherGone(): void {
  try {
    process.stderr.write("[rank] the launcher is gone (its pipe closed): stopping\n");
  } catch {
    // stderr may be the dead launcher's pipe as well
  }
  setTimeout(() => process.exit(1), STOP_GRACE_MS).unref();
  process.kill(process.pid, "SIGTERM");
}

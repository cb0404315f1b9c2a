/**
 * Progress of long work on stderr: a bar (cli-progress) on a terminal, plain lines otherwise (a
 * log file, CI, a pipe) — a new line when the stage changes and at most one per `intervalMs`
 * within it, each with the elapsed time and an estimate of what is left.
 */
import cliProgress from "cli-progress";

export interface Progress {
  /** `fraction` of the work is done; `stage` (e.g. a component) and `detail` (e.g. a tensor) say where. */
  update(fraction: number, stage: string, detail?: string): void;
  stop(): void;
}

export interface ProgressStream {
  write(s: string): unknown;
  readonly isTTY?: boolean;
}

export interface ProgressOptions {
  /** Most one plain line per this many ms within a stage (default 10 s). */
  readonly intervalMs?: number;
  /** Print nothing (e.g. --json). */
  readonly quiet?: boolean;
}

/** "42 s", "3 min 05 s", "1 h 02 min". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}

export function progressReporter(
  title: string,
  stream: ProgressStream,
  options: ProgressOptions = {},
): Progress {
  if (options.quiet) return { update() {}, stop() {} };
  const started = performance.now();
  const timing = (fraction: number) => {
    const elapsed = (performance.now() - started) / 1000;
    // an estimate only once there is something to extrapolate from
    const left =
      fraction > 0.01 && fraction < 1
        ? ` · ~${formatDuration((elapsed * (1 - fraction)) / fraction)} left`
        : "";
    return `${formatDuration(elapsed)}${left}`;
  };
  if (stream.isTTY === true) {
    const bar = new cliProgress.SingleBar(
      {
        format: `${title} [{bar}] {percentage}% {label} · {timing}`,
        stream: stream as NodeJS.WriteStream,
        hideCursor: true,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(1000, 0, { label: "", timing: "" });
    let stopped = false;
    return {
      update: (fraction, stage, detail) =>
        bar.update(Math.round(fraction * 1000), {
          label: detail ? `${stage} ${detail}` : stage,
          timing: timing(fraction),
        }),
      stop: () => {
        if (!stopped) bar.stop();
        stopped = true;
      },
    };
  }
  const interval = options.intervalMs ?? 10_000;
  let lastStage: string | undefined;
  let lastAt = Number.NEGATIVE_INFINITY;
  let lastPercent = -1;
  return {
    update: (fraction, stage, detail) => {
      const now = performance.now();
      const percent = Math.floor(fraction * 100);
      if (stage === lastStage && (now - lastAt < interval || percent === lastPercent)) return;
      lastStage = stage;
      lastAt = now;
      lastPercent = percent;
      stream.write(`${title}: ${percent}% ${stage}${detail ? ` ${detail}` : ""} · ${timing(fraction)}\n`);
    },
    stop: () => {},
  };
}

/**
 * Ctrl-C during long work that cleans up after itself: the first one stops `bar`, says `note` and
 * aborts the returned signal; a second one quits at once. `dispose()` when the work is over.
 */
export function interruptible(
  bar: Progress,
  notice: (text: string) => void,
  note: string,
): { signal: AbortSignal; dispose(): void } {
  const ac = new AbortController();
  const onSigint = () => {
    if (ac.signal.aborted) process.exit(130);
    bar.stop();
    notice(`interrupting: ${note} (Ctrl-C again to quit at once)`);
    ac.abort();
  };
  process.on("SIGINT", onSigint);
  return { signal: ac.signal, dispose: () => process.removeListener("SIGINT", onSigint) };
}

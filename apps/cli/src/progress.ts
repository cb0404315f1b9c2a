/** A progress bar on stderr (cli-progress) that stays silent when stderr is not a terminal. */
import cliProgress from "cli-progress";

export interface Progress {
  update(fraction: number, label: string): void;
  stop(): void;
}

export function progressBar(title: string, enabled = process.stderr.isTTY === true): Progress {
  if (!enabled) return { update() {}, stop() {} };
  const bar = new cliProgress.SingleBar(
    { format: `${title} [{bar}] {percentage}% {label}`, stream: process.stderr, hideCursor: true },
    cliProgress.Presets.shades_classic,
  );
  bar.start(1000, 0, { label: "" });
  return {
    update: (fraction, label) => bar.update(Math.round(fraction * 1000), { label }),
    stop: () => bar.stop(),
  };
}

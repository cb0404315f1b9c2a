/** Number formatting shared by the text reports (decimal units: 1 MB = 10^6 bytes, like GB/s). */
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

/** `x` in the largest of `units` ([scale, name, decimals], largest first) it reaches, else whole `base`s. */
function scaled(x: number, units: readonly (readonly [number, string, number])[], base: string): string {
  const a = Math.abs(x);
  for (const [scale, name, decimals] of units)
    if (a >= scale) return `${(x / scale).toFixed(decimals)} ${name}`;
  return `${Math.round(x)} ${base}`;
}

export function fmtBytes(b: number): string {
  return scaled(
    b,
    [
      [1e9, "GB", 2],
      [1e6, "MB", 2],
      [1e3, "kB", 1],
    ],
    "B",
  );
}

export function fmtFlops(f: number): string {
  return scaled(
    f,
    [
      [1e12, "TFLOP", 2],
      [1e9, "GFLOP", 3],
      [1e6, "MFLOP", 2],
      [1e3, "kFLOP", 1],
    ],
    "FLOP",
  );
}

export function fmtMs(ms: number): string {
  const a = Math.abs(ms);
  if (a === 0) return "0";
  if (a < 0.001) return `${(ms * 1000).toFixed(3)} µs`;
  if (a < 0.1) return `${(ms * 1000).toFixed(1)} µs`;
  return `${ms.toFixed(3)} ms`;
}

export function fmtPct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

export function signed(s: string, v: number): string {
  return v > 0 ? `+${s}` : s;
}

/** Left-aligned first column, right-aligned others. */
export function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  indent = "  ",
): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (r: readonly string[]) =>
    indent +
    r
      .map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i])))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

/** Writes `value` as JSON to `file` atomically: a temp file beside it, then a rename. */
export async function writeJsonAtomic(
  file: string,
  value: unknown,
  indent: number | undefined = 2,
): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    await writeFile(tmp, `${JSON.stringify(value, null, indent)}\n`);
    await rename(tmp, file);
  } catch (cause) {
    await rm(tmp, { force: true });
    throw cause;
  }
}

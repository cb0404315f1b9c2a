/** Number formatting shared by the text reports (decimal units: 1 MB = 10^6 bytes, like GB/s). */

export function fmtBytes(b: number): string {
  const a = Math.abs(b);
  if (a >= 1e9) return `${(b / 1e9).toFixed(2)} GB`;
  if (a >= 1e6) return `${(b / 1e6).toFixed(2)} MB`;
  if (a >= 1e3) return `${(b / 1e3).toFixed(1)} kB`;
  return `${Math.round(b)} B`;
}

export function fmtFlops(f: number): string {
  const a = Math.abs(f);
  if (a >= 1e12) return `${(f / 1e12).toFixed(2)} TFLOP`;
  if (a >= 1e9) return `${(f / 1e9).toFixed(3)} GFLOP`;
  if (a >= 1e6) return `${(f / 1e6).toFixed(2)} MFLOP`;
  if (a >= 1e3) return `${(f / 1e3).toFixed(1)} kFLOP`;
  return `${Math.round(f)} FLOP`;
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

/** Seeded data and command-line values for tests and benchmarks. */

/** A seeded PRNG (mulberry32): numbers in [0, 1), the same sequence in every run. */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The value after `--name` on a benchmark's command line, else `fallback`. */
export function argValue(name: string, fallback: string): string;
export function argValue(name: string): string | undefined;
export function argValue(name: string, fallback?: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : fallback;
}

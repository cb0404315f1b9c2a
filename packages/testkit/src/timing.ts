/**
 * Time limits for tests that scale with how fast this machine runs right now, so that a correct tree
 * passes on a busy machine (a CI box running other jobs, a laptop converting a model) while a hang
 * still fails. The repository's vitest.base.ts measures the slowdown once per package run and hands
 * it to the test processes in ANEMLL_TEST_SLOWDOWN; set that variable yourself to override it.
 */

/** A fixed piece of CPU work, and its time on an idle machine of the reference kind (2 shared cores). */
function work(): number {
  let x = 0;
  for (let i = 1; i < 3_000_000; i++) x += Math.sqrt(i) % 7;
  return x;
}
const REFERENCE_MS = 31.5;

/**
 * How many times longer than on the idle reference machine things take now (at least 1): the
 * median wall time of a few runs of `work()`, over its reference time. It counts both a slower CPU
 * and the share of the cores other processes take (at load average ~23 on 2 cores, the wall time
 * of the same work was 2.3-2.9 times its CPU time).
 */
export function measureSlowdown(): number {
  work(); // compiled
  const wall: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    work();
    wall.push(performance.now() - t);
  }
  wall.sort((a, b) => a - b);
  return Math.max(1, Math.round((wall[2] / REFERENCE_MS) * 10) / 10);
}

/** The slowdown vitest.base.ts measured for this run (1 outside it). */
export function slowdown(): number {
  const v = Number(process.env.ANEMLL_TEST_SLOWDOWN);
  return Number.isFinite(v) && v >= 1 ? v : 1;
}

/** `ms` on the reference machine, stretched by this run's slowdown: for limits a test asserts. */
export function timeLimit(ms: number): number {
  return Math.round(ms * slowdown());
}

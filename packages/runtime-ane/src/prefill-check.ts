/**
 * The prefill check at a chain's first load (function-check.ts decides): through the backend's
 * seam (Backend.functionCheck, the Core ML backend's MLComputePlan and clock) it reads where every
 * function the chain loads runs, times one prefill call against T decode steps, and records the
 * verdict beside the model (prefill-check.json, keyed by the packages' digests and the machine, OS
 * and compute units), so the next load skips the check and a new conversion or OS checks again.
 */
import { createHash } from "node:crypto";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ChainManifest } from "@anemll-qwen35/ir/chain";
import {
  decidePrefill,
  type FunctionPlacement,
  offAneWarnings,
  type PrefillDecision,
} from "./function-check.js";

/**
 * "recorded" (default): use the model folder's record when it matches these packages and this
 * machine, else check and record; "recheck": check again and record; "off": no check, the prefill
 * function is used whenever model.json lists one.
 */
export type PrefillCheckMode = "recorded" | "recheck" | "off";

/** What a backend offers the check (Core ML: MLComputePlan and the clock; tests inject their own). */
export interface FunctionCheckSeam {
  /**
   * The machine, OS and compute units a verdict holds for (the record's key), and whether ops
   * should be on the ANE (false where the compute units leave it out or this Mac has none).
   */
  machine(): Promise<{ readonly key: string; readonly requireAne: boolean }>;
  /** Where the ops of one function of a loaded package run. */
  placement(
    packagePath: string,
    fn: {
      readonly component: string;
      readonly functionName: string;
      readonly sha256: string;
      readonly role: FunctionPlacement["role"];
    },
  ): Promise<FunctionPlacement>;
  /** Runs `run` once and says how long it took, ms. */
  time(what: "prefill" | "decode", run: () => Promise<void>): Promise<number>;
}

/** A verdict, measured at this load or read from the record. */
export interface PrefillCheckResult extends PrefillDecision {
  readonly source: "checked" | "recorded";
  readonly checkedAt: string;
  /** The record's key: machine, OS and compute units. */
  readonly machine: string;
  readonly T: number;
  readonly prefillMs: number;
  readonly decodeMs: number;
  readonly placements: readonly FunctionPlacement[];
  /** Decode or head functions that run ops off the ANE (they stay; the log says so). */
  readonly warnings: readonly string[];
}

/** What the runner hands decide(): the chain's own calls, on a state the check may overwrite. */
export interface PrefillCheckCalls {
  /** One prefill call of T tokens at position 0, without the head. */
  prefill(): Promise<void>;
  /** One decode step at `position`, without the head. */
  decode(position: number): Promise<void>;
  reset(): void;
}

export const PREFILL_CHECK_FILE = "prefill-check.json";
const SCHEMA = "anemll-qwen35.prefill-check";
const VERSION = 1;
/** Records kept per model folder (one per machine/OS/compute units seen). */
const KEEP = 8;

interface Stored extends Omit<PrefillCheckResult, "source"> {
  readonly packages: string;
}

/** One digest over every package of the chain (a new conversion gives a new one). */
function packagesDigest(manifest: ChainManifest): string {
  const h = createHash("sha256");
  for (const c of manifest.components) h.update(`${c.name}:${c.sha256}\n`);
  return h.digest("hex");
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

async function readRecords(file: string): Promise<Stored[] | undefined> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch {
    return [];
  }
  try {
    const doc = JSON.parse(text) as { schema?: unknown; version?: unknown; checks?: unknown };
    if (doc.schema !== SCHEMA || doc.version !== VERSION || !Array.isArray(doc.checks)) return undefined;
    return (doc.checks as Stored[]).filter(
      (c) =>
        typeof c?.packages === "string" &&
        typeof c.machine === "string" &&
        typeof c.keep === "boolean" &&
        typeof c.reason === "string" &&
        Array.isArray(c.placements) &&
        Array.isArray(c.warnings),
    );
  } catch {
    return undefined;
  }
}

export class PrefillCheck {
  private readonly placements: FunctionPlacement[] = [];
  private constructor(
    private readonly file: string,
    private readonly packages: string,
    private readonly machine: { key: string; requireAne: boolean },
    private readonly records: Stored[],
    private readonly notice: (message: string) => void,
    /** The verdict the record holds for these packages on this machine, when it is to be used. */
    readonly recorded: PrefillCheckResult | undefined,
  ) {}

  /** The check for a chain with a prefill function on a backend with a seam (undefined: none to do). */
  static async open(
    dir: string,
    manifest: ChainManifest,
    seam: FunctionCheckSeam | undefined,
    mode: PrefillCheckMode,
    notice: (message: string) => void,
  ): Promise<PrefillCheck | undefined> {
    if (!seam || mode === "off" || !manifest.prefill) return undefined;
    const file = join(dir, PREFILL_CHECK_FILE);
    const packages = packagesDigest(manifest);
    const machine = await seam.machine();
    let records = await readRecords(file);
    if (!records) {
      notice(`${file} is not a prefill-check record this version reads; checking again`);
      records = [];
    }
    const hit = records.find((r) => r.packages === packages && r.machine === machine.key);
    const recorded = mode === "recorded" && hit ? { ...hit, source: "recorded" as const } : undefined;
    return new PrefillCheck(file, packages, machine, records, notice, recorded);
  }

  /** The seam the runner calls once per function of the chain it loads (a recorded verdict needs none). */
  async functionLoaded(
    seam: FunctionCheckSeam,
    packagePath: string,
    fn: Parameters<FunctionCheckSeam["placement"]>[1],
  ): Promise<void> {
    if (this.recorded) return;
    try {
      this.placements.push(await seam.placement(packagePath, fn));
    } catch (err) {
      // an unreadable plan proves nothing: the decision says so (function-check.ts)
      const none = { ane: 0, cpu: 0, gpu: 0, unplaced: 0, offAne: [] };
      this.placements.push({
        component: fn.component,
        function: fn.functionName,
        role: fn.role,
        ...none,
        error: (err as Error).message,
      });
    }
  }

  /**
   * Times one prefill call (after one to warm up) against T decode steps (their median), decides,
   * records the verdict and says it in one line. Leaves the chain reset.
   */
  async decide(seam: FunctionCheckSeam, T: number, calls: PrefillCheckCalls): Promise<PrefillCheckResult> {
    const times: number[] = [];
    let prefillMs = Number.NaN;
    let prefillError: string | undefined;
    try {
      try {
        calls.reset();
        await calls.prefill();
        calls.reset();
        prefillMs = await seam.time("prefill", calls.prefill);
      } catch (err) {
        // a prefill function that cannot run is dropped, not fatal: decode still serves
        prefillError = (err as Error).message;
      }
      calls.reset();
      await calls.decode(0);
      calls.reset();
      for (let p = 0; p < T; p++) times.push(await seam.time("decode", () => calls.decode(p)));
    } finally {
      calls.reset();
    }
    const decodeMs = median(times);
    const decision = decidePrefill({
      placements: this.placements,
      prefillMs,
      decodeMs,
      T,
      requireAne: this.machine.requireAne,
      prefillError,
    });
    const warnings = this.machine.requireAne ? offAneWarnings(this.placements) : [];
    const stored: Stored = {
      packages: this.packages,
      machine: this.machine.key,
      checkedAt: new Date().toISOString(),
      ...decision,
      T,
      prefillMs,
      decodeMs,
      placements: this.placements,
      warnings,
    };
    await this.write(stored);
    const { packages: _, ...result } = stored;
    return { ...result, source: "checked" };
  }

  /** Atomically, beside model.json; a folder we may not write to only costs a check next time. */
  private async write(entry: Stored): Promise<void> {
    const checks = [entry, ...this.records.filter((r) => r.machine !== entry.machine)].slice(0, KEEP);
    const tmp = `${this.file}.tmp-${process.pid}`;
    try {
      await writeFile(tmp, `${JSON.stringify({ schema: SCHEMA, version: VERSION, checks }, null, 2)}\n`);
      await rename(tmp, this.file);
    } catch (err) {
      await rm(tmp, { force: true }).catch(() => {});
      this.notice(
        `could not record the prefill check in ${this.file} (${(err as Error).message}); the next load checks again`,
      );
    }
  }
}

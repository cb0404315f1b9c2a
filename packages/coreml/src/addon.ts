/**
 * The Core ML addon (native/*.mm, one addon), loaded only on macOS where it was built. Elsewhere,
 * and when it was not built or the OS is too old for what is asked, `coreMLAvailability()` says
 * why and `loadCoreMLAddon()` throws a `CoreMLUnavailableError` saying so; nothing pretends to be
 * Core ML.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { release } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { AnemllError } from "@anemll-qwen35/core";
import type { ComputeDevice, ComputeUnits } from "./compute-units.js";

/** Element types a tensor has at the addon boundary (fp16 as bit patterns). */
export type NativeDType = "fp16" | "fp32" | "int32";

export interface NativeFeature {
  readonly name: string;
  readonly shape: readonly number[];
  /** "fp16" | "fp32" | "int32" | "fp64", or Core ML's type code ("0x…") for others. */
  readonly dtype: string;
}

/** A tensor handed to the addon (fp16 as bit patterns). */
export type NativeTensor =
  | { readonly data: Uint16Array; readonly shape: readonly number[]; readonly dtype: "fp16" }
  | { readonly data: Float32Array; readonly shape: readonly number[]; readonly dtype: "fp32" }
  | { readonly data: Int32Array; readonly shape: readonly number[]; readonly dtype: "int32" };

/** An output as the addon returns it: fp64 outputs come as Float64Array. */
export type NativeOutput =
  | NativeTensor
  | { readonly data: Float64Array; readonly shape: readonly number[]; readonly dtype: "fp64" };

/** A buffer a state keeps: `input` is fed from it, `output` goes back into it. */
export interface NativeStateBuffer {
  readonly input: string;
  readonly output: string;
  /** The input's shape (for a KV cache [1, H, ctx, d]). */
  readonly shape: readonly number[];
  readonly dtype: NativeDType;
}

export interface NativeStateSpec {
  /** Pairs used in turn: step t's output is step t+1's input (IOSurface-backed for fp16). */
  readonly carried?: readonly NativeStateBuffer[];
  /** KV caches: the output's rows [position, position + T) of axis 2 are copied in. */
  readonly rowWritten?: readonly NativeStateBuffer[];
}

export interface NativeState {
  /**
   * Zeroes every buffer (and the package's MLState), on the state's serial queue: after the
   * predictions asked for before, before those asked for after. The promise may be ignored.
   */
  reset(): Promise<void>;
  /**
   * Dense copies of every buffer, on the state's queue (after the predictions asked for before):
   * the carried buffers' current halves, the KV caches, then the MLState's arrays by name; of the
   * KV caches and 4-D MLState arrays only rows [0, rows) of axis 2.
   */
  read(rows: number): Promise<ArrayBuffer[]>;
  /** Puts what `read(rows)` returned back (KV rows from `rows` on zeroed), on the state's queue. */
  write(buffers: readonly ArrayBuffer[], rows: number): Promise<void>;
}

/** What crossed between JS and one model, counted by the addon. */
export interface NativeStats {
  readonly predictions: number;
  /** Bytes copied from JS inputs. */
  readonly bytesIn: number;
  /** Bytes copied into JS outputs. */
  readonly bytesOut: number;
  /** Bytes copied on the native side to keep state (KV rows; outputs Core ML did not write into their backing). */
  readonly bytesKept: number;
  /** State outputs Core ML wrote somewhere other than the backing it was given. */
  readonly backingMisses: number;
}

export interface NativeModel {
  describe(): { inputs: NativeFeature[]; outputs: NativeFeature[]; states: NativeFeature[] };
  /**
   * A state for this package: its MLState (when it declares states) and the buffers of `spec`,
   * zeroed. Any model loaded from the same package (another function) may use it too.
   */
  newState(spec?: NativeStateSpec): NativeState;
  /**
   * One prediction, off the JS thread. With `state`, every buffer of it the model has an input
   * for is bound, and the matching outputs are kept there (they are not returned); `position` is
   * the first KV row this step writes. fp16 data are bit patterns.
   */
  predict(
    inputs: Record<string, NativeTensor>,
    state?: NativeState,
    position?: number,
  ): Promise<Record<string, NativeOutput>>;
  stats(): NativeStats;
  /** Drops this handle; predictions already asked for still finish. Never blocks. */
  dispose(): void;
  /**
   * `dispose()`, then resolves once the addon holds the MLModel no more: the predictions asked for
   * before have finished and the last reference is released (Core ML has no unload call; a model's
   * resources go with the MLModel object). Also after `dispose()`. States made from the model keep
   * their MLState until they are dropped themselves.
   */
  unload(): Promise<void>;
}

/** One operation of MLComputePlan's view of a compiled program. */
export interface NativePlanOp {
  /** MLModelStructureProgramOperation.operatorName, e.g. "ios18.conv" or "const". */
  readonly operatorName: string;
  readonly outputs: readonly string[];
  /** computeDeviceUsageForMLProgramOperation: preferredComputeDevice (null when Core ML gives none). */
  readonly preferred: ComputeDevice | null;
  readonly supported: readonly ComputeDevice[];
  /** estimatedCostOfMLProgramOperation: weight in [0, 1] (null when Core ML gives none). */
  readonly cost: number | null;
}

export interface NativePlan {
  /** Every function; operations of nested blocks follow the operation that holds them. */
  readonly functions: readonly { readonly name: string; readonly operations: readonly NativePlanOp[] }[];
}

/** One entry of MLAllComputeDevices(), in Core ML's order. */
export type NativeComputeDevice =
  | { readonly kind: "cpu"; readonly className: string }
  /** `name`: its Metal device's name (e.g. "Apple M4 Pro"; a virtual Mac's is a paravirtual one). */
  | { readonly kind: "gpu"; readonly className: string; readonly name: string | null }
  | { readonly kind: "neuralEngine"; readonly className: string; readonly totalCoreCount: number }
  /** A device class this addon does not know (a newer Core ML). */
  | { readonly kind: "other"; readonly className: string };

/** This process's memory, from task_info(TASK_VM_INFO), in bytes (null where the kernel lacks it). */
export interface NativeMemoryFootprint {
  /** phys_footprint: what Activity Monitor shows as the process's memory. */
  readonly physFootprint: number | null;
  /** ledger_phys_footprint_peak. */
  readonly physFootprintPeak: number | null;
  /** ledger_tag_neural_footprint: memory tagged for the Neural Engine and charged to this process. */
  readonly neuralFootprint: number | null;
}

export interface NativeMeasurement {
  readonly averageMs: number;
  readonly medianMs: number;
  readonly minMs: number;
  readonly maxMs: number;
  readonly runs: number;
  readonly warmup: number;
}

export interface CoreMLAddon {
  /**
   * +[MLModel compileModelAtURL:error:] into `compiledPath`, renamed into place atomically; when
   * another process compiled the same path first, its copy is kept and this resolves all the same.
   */
  compile(packagePath: string, compiledPath: string): Promise<string>;
  load(compiledPath: string, computeUnits: ComputeUnits, functionName?: string | null): Promise<NativeModel>;
  /**
   * MLComputePlan of a compiled model, every function; with `functionName` (a multifunction
   * package) that function's plan alone, and an error naming the functions there are when it has
   * no such function. Fails after `timeoutMs`.
   */
  computePlan(
    compiledPath: string,
    computeUnits: ComputeUnits,
    functionName: string | null,
    timeoutMs: number,
  ): Promise<NativePlan>;
  /** Zero inputs, `warmup` predictions, then `runs` timed ones (with an MLState when the model declares states). */
  measure(
    compiledPath: string,
    computeUnits: ComputeUnits,
    functionName: string | null,
    warmup: number,
    runs: number,
  ): Promise<NativeMeasurement>;
  /** MLAllComputeDevices() (macOS 14). */
  computeDevices(): Promise<NativeComputeDevice[]>;
  memoryFootprint(): NativeMemoryFootprint;
  macosVersion(): string;
}

export class CoreMLUnavailableError extends AnemllError {
  constructor(message: string) {
    super("E_COREML_UNAVAILABLE", message);
  }
}

/**
 * What is asked of Core ML: running models (MLState: macOS 15), its compute plan (macOS 14.4), or
 * the compute devices it sees and this process's memory footprint (macOS 14, the addon's floor).
 */
export type CoreMLFeature = "predict" | "computePlan" | "devices";

/** The first Darwin kernel (major, minor) with each feature: 24 = macOS 15, 23.4 = macOS 14.4. */
const MIN_DARWIN: Readonly<Record<CoreMLFeature, readonly [number, number, string, string]>> = {
  predict: [24, 0, "15", "the Core ML backend"],
  computePlan: [23, 4, "14.4", "MLComputePlan"],
  devices: [23, 0, "14", "MLAllComputeDevices"],
};

export const ADDON_FILE = "anemll_qwen35_coreml.node";

export function addonPath(): string {
  // src/ and dist/ both sit one level below the package root
  return join(dirname(fileURLToPath(import.meta.url)), "..", "build", "Release", ADDON_FILE);
}

export function coreMLAvailability(feature: CoreMLFeature = "predict"): {
  available: boolean;
  reason?: string;
} {
  const [major, minor, macos, what] = MIN_DARWIN[feature];
  if (process.platform !== "darwin") {
    return { available: false, reason: `${what} needs macOS ${macos} or later; this is ${process.platform}` };
  }
  const [kmajor, kminor] = release().split(".").map(Number);
  if (kmajor < major || (kmajor === major && kminor < minor)) {
    return { available: false, reason: `${what} needs macOS ${macos} or later (Darwin ${release()})` };
  }
  if (!existsSync(addonPath())) {
    return {
      available: false,
      reason: `the Core ML addon is not built (${addonPath()}); run \`pnpm --filter @anemll-qwen35/coreml build:native\``,
    };
  }
  return { available: true };
}

let cached: CoreMLAddon | undefined;

/** The addon, for `feature`; throws CoreMLUnavailableError saying why it cannot be had here. */
export function loadCoreMLAddon(feature: CoreMLFeature = "predict"): CoreMLAddon {
  const status = coreMLAvailability(feature);
  if (!status.available) throw new CoreMLUnavailableError(status.reason ?? "Core ML is unavailable");
  cached ??= createRequire(import.meta.url)(addonPath()) as CoreMLAddon;
  return cached;
}

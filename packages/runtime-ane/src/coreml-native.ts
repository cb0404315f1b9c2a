/**
 * The Core ML addon (native/coreml_addon.mm), loaded only on macOS. Elsewhere, and when the addon
 * was not built, `loadCoreMLAddon()` throws a `CoreMLUnavailableError` that says why; nothing
 * pretends to be Core ML.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { release } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { AnemllError } from "@anemll-qwen35/core";

export type ComputeUnits = "cpuAndNeuralEngine" | "cpuOnly" | "cpuAndGPU" | "all";

export interface NativeFeature {
  readonly name: string;
  readonly shape: readonly number[];
  readonly dtype: "fp16" | "fp32" | "int32" | "fp64" | "unknown";
}

export interface NativeTensor {
  readonly data: Uint16Array | Float32Array | Int32Array;
  readonly shape: readonly number[];
  readonly dtype: "fp16" | "fp32" | "int32";
}

export interface NativeState {
  /** Zeroes every buffer of the state. */
  reset(): void;
}

export interface NativeModel {
  describe(): { inputs: NativeFeature[]; outputs: NativeFeature[]; states: NativeFeature[] };
  newState(): NativeState;
  /** Runs on the model's serial queue off the JS thread. fp16 data are bit patterns. */
  predict(inputs: Record<string, NativeTensor>, state?: NativeState): Promise<Record<string, NativeTensor>>;
  dispose(): void;
}

export interface CoreMLAddon {
  compile(packagePath: string, compiledPath: string): Promise<string>;
  load(compiledPath: string, computeUnits: ComputeUnits, functionName?: string): Promise<NativeModel>;
  macosVersion(): string;
}

export class CoreMLUnavailableError extends AnemllError {
  constructor(message: string) {
    super("E_COREML_UNAVAILABLE", message);
  }
}

/** Darwin kernel 24 = macOS 15 (Sequoia): the first with MLState and multifunction selection. */
const MIN_DARWIN_MAJOR = 24;

export function coreMLAvailability(): { available: boolean; reason?: string } {
  if (process.platform !== "darwin") {
    return {
      available: false,
      reason: `the Core ML backend needs macOS 15 or later; this is ${process.platform}`,
    };
  }
  const major = Number(release().split(".")[0]);
  if (major < MIN_DARWIN_MAJOR) {
    return { available: false, reason: `the Core ML backend needs macOS 15 or later (Darwin ${release()})` };
  }
  if (!existsSync(addonPath())) {
    return {
      available: false,
      reason: `the Core ML addon is not built (${addonPath()}); run \`pnpm --filter @anemll-qwen35/runtime-ane build:native\``,
    };
  }
  return { available: true };
}

function addonPath(): string {
  // src/ and dist/ both sit one level below the package root
  const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
  return join(pkg, "build", "Release", "runtime_ane_coreml.node");
}

let cached: CoreMLAddon | undefined;

export function loadCoreMLAddon(): CoreMLAddon {
  if (cached) return cached;
  const status = coreMLAvailability();
  if (!status.available) throw new CoreMLUnavailableError(status.reason ?? "Core ML is unavailable");
  cached = createRequire(import.meta.url)(addonPath()) as CoreMLAddon;
  return cached;
}

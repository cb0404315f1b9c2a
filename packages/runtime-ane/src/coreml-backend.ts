/**
 * The Core ML backend (macOS 15+): each package is compiled once to .mlmodelc in a cache keyed by
 * the package digest, then loaded with the chosen compute units and run on the addon's serial
 * queue. The first ANE compile of a large package can take minutes; later loads hit the cache.
 */
import { existsSync } from "node:fs";
import { mkdir, rename, rm } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { type Tensor, tensor } from "@anemll-qwen35/core";
import type { IoDType } from "@anemll-qwen35/ir/chain";
import type { Backend, ComponentState, LoadComponentOptions, LoadedComponent } from "./backend.js";
import { type ComputeUnits, loadCoreMLAddon, type NativeState, type NativeTensor } from "./coreml-native.js";

export interface CoreMLBackendOptions {
  /** Default "cpuAndNeuralEngine". */
  readonly computeUnits?: ComputeUnits;
  /** Compiled-model cache (default $ANEMLL_QWEN35_CACHE/coreml or ~/.cache/anemll-qwen35/coreml). */
  readonly cacheDir?: string;
  /** Told before a package is compiled (the first compile for the ANE can take minutes). */
  readonly onCompile?: (event: { component: string; stage: "start" | "done"; seconds?: number }) => void;
}

export function defaultCompileCacheDir(): string {
  const base = process.env.ANEMLL_QWEN35_CACHE ?? join(homedir(), ".cache", "anemll-qwen35");
  return join(base, "coreml");
}

function toNative(t: Tensor, dtype: IoDType): NativeTensor {
  if (dtype === "fp16" && t.dtype === "f16") return { data: t.data as Uint16Array, shape: t.shape, dtype };
  if (dtype === "fp32" && t.dtype === "f32") return { data: t.data as Float32Array, shape: t.shape, dtype };
  if (dtype === "int32" && t.dtype === "i32") return { data: t.data as Int32Array, shape: t.shape, dtype };
  throw new TypeError(`input of dtype ${t.dtype} cannot feed a ${dtype} model input`);
}

function fromNative(t: NativeTensor): Tensor {
  if (t.dtype === "fp16") return tensor("f16", t.shape, t.data as Uint16Array);
  if (t.dtype === "fp32") return tensor("f32", t.shape, t.data as Float32Array);
  return tensor("i32", t.shape, t.data as Int32Array);
}

class CoreMLState implements ComponentState {
  constructor(readonly native: NativeState) {}
  reset(): void {
    this.native.reset();
  }
}

export function coreMLBackend(options: CoreMLBackendOptions = {}): Backend {
  const addon = loadCoreMLAddon(); // throws CoreMLUnavailableError off macOS 15+
  const cacheDir = options.cacheDir ?? defaultCompileCacheDir();
  return {
    name: "coreml",
    async load(packagePath: string, opts: LoadComponentOptions): Promise<LoadedComponent> {
      await mkdir(cacheDir, { recursive: true });
      const compiled = join(cacheDir, `${opts.sha256}.mlmodelc`);
      if (!existsSync(compiled)) {
        const started = performance.now();
        options.onCompile?.({ component: opts.name, stage: "start" });
        const tmp = `${compiled}.tmp-${process.pid}`;
        await rm(tmp, { recursive: true, force: true });
        await addon.compile(packagePath, tmp);
        await rename(tmp, compiled);
        options.onCompile?.({
          component: opts.name,
          stage: "done",
          seconds: (performance.now() - started) / 1000,
        });
      }
      opts.signal?.throwIfAborted();
      const model = await addon.load(
        compiled,
        options.computeUnits ?? "cpuAndNeuralEngine",
        opts.functionName,
      );
      const dtypes = new Map(opts.io.inputs.map((t) => [t.name, t.dtype]));
      return {
        newState: () => new CoreMLState(model.newState()),
        async predict(inputs: Record<string, Tensor>, state?: ComponentState) {
          const native: Record<string, NativeTensor> = {};
          for (const [name, t] of Object.entries(inputs))
            native[name] = toNative(t, dtypes.get(name) ?? "fp16");
          const out = await model.predict(native, state instanceof CoreMLState ? state.native : undefined);
          const result: Record<string, Tensor> = {};
          for (const [name, t] of Object.entries(out)) result[name] = fromNative(t);
          return result;
        },
        dispose: () => model.dispose(),
      };
    },
  };
}

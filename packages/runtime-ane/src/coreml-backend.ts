/**
 * The Core ML backend (macOS 15+), over @anemll-qwen35/coreml's addon: each package is compiled
 * once to .mlmodelc in a cache keyed by the package digest, then loaded with the chosen compute
 * units. A package's state (GDN states as IOSurface-backed ping-pong pairs, io KV caches, its
 * MLState) lives on the native side; per step only hidden state, position and mask go in and
 * hidden state or logits come out. The first ANE compile of a large package can take minutes;
 * later loads hit the cache.
 */
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { cpus, homedir, release } from "node:os";
import { join } from "node:path";
import { type Tensor, tensor } from "@anemll-qwen35/core";
import {
  type ComputeUnits,
  loadCoreMLAddon,
  type NativeModel,
  type NativeOutput,
  type NativeState,
  type NativeStateBuffer,
  type NativeTensor,
} from "@anemll-qwen35/coreml";
import {
  type ComponentSnapshot,
  type IoDType,
  type IoTensor,
  rowStatePairs,
  type StatePlan,
} from "@anemll-qwen35/ir/chain";
import {
  type Backend,
  type ComponentState,
  type LoadComponentOptions,
  type LoadedComponent,
  TransferCounter,
} from "./backend.js";
import { placementOf } from "./function-check.js";
import type { FunctionCheckSeam } from "./prefill-check.js";

export interface CoreMLBackendOptions {
  /** Default "cpuAndNeuralEngine". */
  readonly computeUnits?: ComputeUnits;
  /** Compiled-model cache (default $ANEMLL_QWEN35_CACHE/coreml or ~/.cache/anemll-qwen35/coreml). */
  readonly cacheDir?: string;
  /** Told before a package is compiled (the first compile for the ANE can take minutes). */
  readonly onCompile?: (event: { component: string; stage: "start" | "done"; seconds?: number }) => void;
  /** Told what the user should know, e.g. that Core ML sees no Neural Engine on this Mac. */
  readonly onNotice?: (message: string) => void;
}

/** MLComputePlan of a large fused function compiles it for the ANE first: minutes, at worst. */
const PLAN_TIMEOUT_MS = 15 * 60_000;

export const NO_NEURAL_ENGINE =
  "Core ML sees no Neural Engine on this Mac (MLAllComputeDevices lists none: a virtual Mac, such as a " +
  "hosted CI runner?): every op runs on the CPU or GPU, and ANE speed and placement do not apply here";

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

function fromNative(t: NativeOutput): Tensor {
  if (t.dtype === "fp16") return tensor("f16", t.shape, t.data);
  if (t.dtype === "fp32") return tensor("f32", t.shape, t.data);
  if (t.dtype === "int32") return tensor("i32", t.shape, t.data);
  return tensor("f32", t.shape, Float32Array.from(t.data)); // fp64: no such tensor dtype here
}

const buffer = (b: { input: IoTensor; output: IoTensor }): NativeStateBuffer => ({
  input: b.input.name,
  output: b.output.name,
  shape: b.input.shape,
  dtype: b.input.dtype,
});

interface CoreMLSnapshot extends ComponentSnapshot {
  readonly rows: number;
  readonly buffers: readonly ArrayBuffer[];
}

class CoreMLState implements ComponentState {
  /** A reset that failed, reported by the next prediction. */
  failure: unknown;
  constructor(
    readonly native: NativeState,
    private readonly plan: StatePlan,
  ) {}
  reset(): void {
    // queued on the state's serial queue, so it lands before the next prediction
    this.native.reset().catch((err) => {
      this.failure = err;
    });
  }
  async snapshot(rows: number): Promise<CoreMLSnapshot> {
    if (this.failure) throw this.failure;
    const buffers = await this.native.read(rows);
    return { rows, buffers, bytes: buffers.reduce((n, b) => n + b.byteLength, 0) };
  }
  async restore(s: ComponentSnapshot): Promise<void> {
    const snap = s as CoreMLSnapshot;
    await this.native.write(snap.buffers, snap.rows);
    this.failure = undefined;
  }
  async selectRow(row: number, kvRows: number): Promise<void> {
    if (this.failure) throw this.failure;
    const pairs = rowStatePairs(this.plan);
    if (pairs.length === 0) return;
    // the whole state through the host (read, copy the row, write back): a commit before a decode
    // or prefill call after speculating (once a turn), not a step's work. read() lists the carried
    // buffers first, in the plan's order.
    const buffers = await this.native.read(kvRows);
    for (const { rows, kept } of pairs) {
      const bytes = buffers[kept].byteLength;
      new Uint8Array(buffers[kept]).set(new Uint8Array(buffers[rows], row * bytes, bytes));
    }
    await this.native.write(buffers, kvRows);
  }
}

export function coreMLBackend(options: CoreMLBackendOptions = {}): Backend {
  const addon = loadCoreMLAddon(); // throws CoreMLUnavailableError off macOS 15+
  const cacheDir = options.cacheDir ?? defaultCompileCacheDir();
  const live = new Set<NativeModel>();
  const gone = new TransferCounter(); // totals of disposed models
  const units = options.computeUnits ?? "cpuAndNeuralEngine";
  const wantsAne = units === "cpuAndNeuralEngine" || units === "all";
  // asked once, at the first load: is there a Neural Engine at all?
  let ane: Promise<boolean> | undefined;
  const neuralEngine = () => {
    ane ??= addon.computeDevices().then(
      (ds) => {
        const has = ds.some((d) => d.kind === "neuralEngine");
        if (!has && wantsAne) options.onNotice?.(NO_NEURAL_ENGINE);
        return has;
      },
      (err) => {
        // not knowing is no reason to stop a load: assume the ANE a Mac normally has
        options.onNotice?.(`could not ask Core ML for its compute devices: ${(err as Error).message}`);
        return true;
      },
    );
    return ane;
  };
  const compiledPath = (sha256: string) => join(cacheDir, `${sha256}.mlmodelc`);
  const functionCheck: FunctionCheckSeam = {
    async machine() {
      const has = await neuralEngine();
      return {
        key: `${process.platform} ${release()} · macOS ${addon.macosVersion()} · ${cpus()[0]?.model ?? "?"} · ${units}`,
        requireAne: wantsAne && has,
      };
    },
    async placement(_path, fn) {
      const plan = await addon.computePlan(compiledPath(fn.sha256), units, fn.functionName, PLAN_TIMEOUT_MS);
      const ops = plan.functions.find((f) => f.name === fn.functionName)?.operations ?? [];
      return placementOf(fn.component, fn.functionName, fn.role, ops);
    },
    async time(_what, run) {
      const t0 = performance.now();
      await run();
      return performance.now() - t0;
    },
  };
  return {
    name: "coreml",
    functionCheck,
    transfers() {
      const total = new TransferCounter();
      total.backingMisses = 0;
      total.add(gone);
      for (const m of live) total.add(m.stats());
      return total.snapshot();
    },
    async load(packagePath: string, opts: LoadComponentOptions): Promise<LoadedComponent> {
      await neuralEngine();
      await mkdir(cacheDir, { recursive: true });
      const compiled = compiledPath(opts.sha256);
      if (!existsSync(compiled)) {
        const started = performance.now();
        options.onCompile?.({ component: opts.name, stage: "start" });
        await addon.compile(packagePath, compiled); // atomic; a concurrent compile of the same package is fine
        options.onCompile?.({
          component: opts.name,
          stage: "done",
          seconds: (performance.now() - started) / 1000,
        });
      }
      opts.signal?.throwIfAborted();
      const loadFunction = async (name: string) => {
        const m = await addon.load(compiled, units, name);
        live.add(m);
        return m;
      };
      // the prefill and verify functions: more models of the same compiled package, run on one
      // native state (buffers bound by name, KV rows written T at a time); with lazyMain the
      // default function is loaded when first run (Core ML keeps a weight copy per loaded function)
      const pf = opts.prefill;
      const vf = opts.verify;
      const prefillModel = pf ? await loadFunction(pf.function) : undefined;
      const verifyModel = vf ? await loadFunction(vf.function) : undefined;
      let model =
        opts.lazyMain && (verifyModel ?? prefillModel) ? undefined : await loadFunction(opts.functionName);
      const stateModel = (model ?? verifyModel ?? prefillModel) as NativeModel;
      const mainModel = async () => {
        model ??= await loadFunction(opts.functionName);
        return model;
      };
      const run = (get: () => NativeModel | Promise<NativeModel>, io: LoadComponentOptions["io"]) => {
        const dtypes = new Map(io.inputs.map((t) => [t.name, t.dtype]));
        return async (inputs: Record<string, Tensor>, state?: ComponentState, position?: number) => {
          const native: Record<string, NativeTensor> = {};
          for (const [name, t] of Object.entries(inputs))
            native[name] = toNative(t, dtypes.get(name) ?? "fp16");
          let st: NativeState | undefined;
          if (state instanceof CoreMLState) {
            if (state.failure) throw state.failure;
            st = state.native;
          }
          const out = await (await get()).predict(native, st, position);
          const result: Record<string, Tensor> = {};
          for (const [name, t] of Object.entries(out)) result[name] = fromNative(t);
          return result;
        };
      };
      return {
        newState: (plan: StatePlan) =>
          new CoreMLState(
            stateModel.newState({
              carried: plan.carried.map(buffer),
              rowWritten: plan.rowWritten.map(buffer),
            }),
            plan,
          ),
        predict: run(mainModel, opts.io),
        prefill: pf &&
          prefillModel && { io: pf.io, tokens: pf.tokens, predict: run(() => prefillModel, pf.io) },
        verify: vf && verifyModel && { io: vf.io, tokens: vf.tokens, predict: run(() => verifyModel, vf.io) },
        dispose() {
          for (const m of [model, prefillModel, verifyModel]) {
            if (!m || !live.delete(m)) continue;
            gone.add(m.stats());
            m.dispose();
          }
        },
      };
    },
  };
}

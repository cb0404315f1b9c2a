/**
 * The reference backend: the ir interpreter runs the very MIL program that Core ML would run,
 * on any OS. `fp16` precision rounds every fp16 op result to fp16 as the ANE does. It keeps a
 * package's state as host tensors (ir's HostState), under the same contract as Core ML's native
 * buffers, and counts what crosses its predict() the same way.
 */

import type { Tensor } from "@anemll-qwen35/core";
import { HostState, type StatePlan } from "@anemll-qwen35/ir/chain";
import {
  checkProgram,
  MilInterpreter,
  type MilState,
  readMlPackage,
  type WeightMode,
} from "@anemll-qwen35/ir/mil";
import {
  type Backend,
  type ComponentState,
  type LoadComponentOptions,
  type LoadedComponent,
  TransferCounter,
  tensorBytes,
} from "./backend.js";

export interface ReferenceBackendOptions {
  /** "fp32" (default): exact math; "fp16": ANE-like rounding of every fp16 result. */
  readonly precision?: "fp32" | "fp16";
  /** fp16 mode: flush fp16 subnormal results to zero, as the ANE does. */
  readonly flushSubnormals?: boolean;
  /**
   * "packed" (default): LUT / int8 weights stay compressed in memory and tables are read by row;
   * "dense": every weight is expanded to fp32 once (the same outputs, several times the memory).
   */
  readonly weights?: WeightMode;
  /** fp16 mode: ops whose results stay fp32 (mixed-precision islands; see the interpreter). */
  readonly keepFp32?: (op: { readonly type: string; readonly name: string }) => boolean;
}

class InterpreterState extends HostState<MilState | undefined> implements ComponentState {}

export function referenceBackend(options: ReferenceBackendOptions = {}): Backend {
  const counter = new TransferCounter();
  return {
    name: "reference",
    transfers: () => counter.snapshot(),
    async load(packagePath: string, opts: LoadComponentOptions): Promise<LoadedComponent> {
      const model = await readMlPackage(packagePath, { check: (m) => checkProgram(m.program) });
      const interpreter = (functionName: string) =>
        new MilInterpreter(model.program, {
          functionName,
          precision: options.precision ?? "fp32",
          flushSubnormals: options.flushSubnormals,
          weights: options.weights,
          keepFp32: options.keepFp32,
          onNonFinite: "ignore",
        });
      // each function's interpreter is made when first run (a speculating chain never runs decode)
      const lazy = (name: string) => {
        let made: MilInterpreter | undefined;
        return () => {
          made ??= interpreter(name);
          return made;
        };
      };
      const main = lazy(opts.functionName);
      const run = (fn: () => MilInterpreter, io: LoadComponentOptions["io"]) => {
        // the kept buffers this function reads (an MTP chain's decode does not read the verify's rows)
        const names = new Set(io.inputs.map((t) => t.name));
        return async function predict(
          inputs: Record<string, Tensor>,
          state?: ComponentState,
          position?: number,
          rows?: number,
        ) {
          // The interpreter computes synchronously: give the event loop a turn first, so that a
          // server or UI driving the chain keeps serving I/O (and sees aborts) during generation.
          await new Promise<void>((resolve) => setImmediate(resolve));
          counter.predictions++;
          counter.bytesIn += tensorBytes(inputs);
          const st = state instanceof InterpreterState ? state : undefined;
          // fp32 outputs skip an fp16 bit-pattern round trip; fp16-typed inputs round them again.
          // Carried state outputs are written into the buffers they replace (no allocation a step).
          const r = fn().run(st ? st.bind(inputs, names) : inputs, {
            state: st?.core,
            outputs: "fp32",
            into: st?.carriedTargets(),
          }).outputs;
          let outputs = r;
          if (st) {
            const kept = st.keep(r, position, rows);
            counter.bytesKept += kept.copied;
            outputs = kept.outputs;
          }
          counter.bytesOut += tensorBytes(outputs);
          return outputs;
        };
      };
      const pf = opts.prefill;
      const vf = opts.verify;
      // the package's MLState is the same for every function: any of them makes it
      const stateMaker = lazy(vf?.function ?? opts.functionName);
      return {
        newState: (plan: StatePlan) =>
          new InterpreterState(plan, () => (plan.coreStates.length ? stateMaker().newState() : undefined), {
            copy: (core) => core?.clone(),
            bytes: (core) => core?.bytes ?? 0,
          }),
        predict: run(main, opts.io),
        // the prefill and verify functions bind and keep the same buffers (their kept inputs and
        // outputs share names); a short chunk's io KV rows past its tokens are not kept
        prefill: pf && {
          io: pf.io,
          tokens: pf.tokens,
          partialRows: true,
          predict: run(lazy(pf.function), pf.io),
        },
        verify: vf && { io: vf.io, tokens: vf.tokens, predict: run(lazy(vf.function), vf.io) },
        dispose() {},
      };
    },
  };
}

/**
 * The reference backend: the ir interpreter runs the very MIL program that Core ML would run,
 * on any OS. `fp16` precision rounds every fp16 op result to fp16 as the ANE does.
 */

import type { Tensor } from "@anemll-qwen35/core";
import {
  checkProgram,
  MilInterpreter,
  type MilState,
  readMlPackage,
  type WeightMode,
} from "@anemll-qwen35/ir/mil";
import type { Backend, ComponentState, LoadComponentOptions, LoadedComponent } from "./backend.js";

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
}

class InterpreterState implements ComponentState {
  constructor(
    readonly interp: MilInterpreter,
    public state: MilState,
  ) {}
  reset(): void {
    this.state = this.interp.newState();
  }
}

export function referenceBackend(options: ReferenceBackendOptions = {}): Backend {
  return {
    name: "reference",
    async load(packagePath: string, opts: LoadComponentOptions): Promise<LoadedComponent> {
      const model = await readMlPackage(packagePath, { check: (m) => checkProgram(m.program) });
      const interp = new MilInterpreter(model.program, {
        functionName: opts.functionName,
        precision: options.precision ?? "fp32",
        flushSubnormals: options.flushSubnormals,
        weights: options.weights,
        onNonFinite: "ignore",
      });
      return {
        newState: () => new InterpreterState(interp, interp.newState()),
        async predict(inputs: Record<string, Tensor>, state?: ComponentState) {
          // The interpreter computes synchronously: give the event loop a turn first, so that a
          // server or UI driving the chain keeps serving I/O (and sees aborts) during generation.
          await new Promise<void>((resolve) => setImmediate(resolve));
          const st = state instanceof InterpreterState ? state.state : undefined;
          // fp32 outputs skip an fp16 bit-pattern round trip; fp16-typed inputs round them again
          return interp.run(inputs, { state: st, outputs: "fp32" }).outputs;
        },
        dispose() {},
      };
    },
  };
}

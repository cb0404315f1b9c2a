/** Small helpers shared by the tests. */
import type { MilBuilder, MlModel } from "@anemll-qwen35/ir/mil";
import { analyzeModel, type ComputeUnits, type OpEntry } from "../src/index.js";

/** The op entry named `name` in the model's main function (static analysis). */
export function opNamed(model: MlModel, name: string, units: ComputeUnits = "cpuAndNeuralEngine"): OpEntry {
  const fn = analyzeModel(model, units).functions[0];
  const op = fn.ops.find((o) => o.name === name);
  if (!op) throw new Error(`no op named ${name}; ops: ${fn.ops.map((o) => o.name).join(", ")}`);
  return op;
}

export function modelOf(b: MilBuilder): MlModel {
  return b.model();
}

export const readTotal = (o: OpEntry): number =>
  o.bytesRead.weights + o.bytesRead.activations + o.bytesRead.state;

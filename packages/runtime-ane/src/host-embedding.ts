/**
 * The embedding lookup on the host: the chain's embed package is a table, so the runner reads
 * the token's row from it itself instead of asking a backend (Core ML) for a prediction per
 * token. The package is read with ir's reader and its table kept as stored: an fp16 table stays
 * in its weight file and one row is read (a positional read the page cache serves) per token; a
 * LUT table stays packed (its indices and palettes) and one row is decoded per token. ir's
 * interpreter does that lookup, so the row is bit-identical to what the package computes.
 */
import type { Tensor } from "@anemll-qwen35/core";
import { ChainProtocolError, type ComponentIO } from "@anemll-qwen35/ir/chain";
import { checkProgram, MilInterpreter, readMlPackage } from "@anemll-qwen35/ir/mil";
import type { ComponentState, LoadedComponent } from "./backend.js";

/** The embed package as a component that runs on the host (no backend, no state). */
export async function loadHostEmbedding(
  packagePath: string,
  name: string,
  functionName: string,
  io: ComponentIO,
): Promise<LoadedComponent> {
  if (io.component !== "embed") throw new ChainProtocolError(name, `is a ${io.component}, not the embedding`);
  const model = await readMlPackage(packagePath, { check: (m) => checkProgram(m.program) });
  // packed weights: the table is read by row (fp16) or decoded by row (LUT), never expanded
  const interp = new MilInterpreter(model.program, { functionName, precision: "fp32", weights: "packed" });
  return {
    newState(): ComponentState {
      return { reset() {} };
    },
    async predict(inputs: Record<string, Tensor>) {
      return interp.run(inputs).outputs; // declared dtype: fp16 rows as fp16 bit patterns
    },
    dispose() {},
  };
}

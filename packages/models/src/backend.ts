/**
 * The backends a model runs on, and which one "auto" picks:
 * - a converted chain (a folder with model.json) runs on "coreml" (Core ML, the ANE; macOS 15+) or
 *   "reference" (the MIL interpreter running the same program, any OS); auto = coreml where it is
 *   available, else reference;
 * - a Qwen3.5 checkpoint (config.json + safetensors, Hugging Face or MLX layout) runs on "mlx".
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { coreMLAvailability } from "@anemll-qwen35/coreml";
import { CHAIN_MANIFEST_FILE } from "@anemll-qwen35/ir/chain";
import { ModelLoadError } from "./errors.js";

export type BackendName = "coreml" | "reference" | "mlx";
export type BackendChoice = "auto" | BackendName;
export const BACKEND_NAMES: readonly BackendName[] = ["coreml", "reference", "mlx"];

/** What a folder holds: a converted chain or a checkpoint. */
export type ModelKind = "chain" | "checkpoint";

export function modelKind(dir: string, ref = dir): ModelKind {
  if (existsSync(join(dir, CHAIN_MANIFEST_FILE))) return "chain";
  if (!existsSync(dir)) throw new ModelLoadError(ref, "no such folder");
  // a conversion keeps the checkpoint's config.json beside its packages: without model.json (and
  // without weights of a checkpoint) it is a damaged chain, not a checkpoint to hand to MLX
  const files = readdirSync(dir);
  const packages = files.filter((f) => f.endsWith(".mlpackage"));
  if (packages.length > 0 && !files.some((f) => f.endsWith(".safetensors"))) {
    throw new ModelLoadError(
      ref,
      `holds Core ML packages (${packages.slice(0, 3).join(", ")}${packages.length > 3 ? ", …" : ""}) but no ` +
        `${CHAIN_MANIFEST_FILE}: a conversion that did not finish or lost its ${CHAIN_MANIFEST_FILE}; convert again`,
    );
  }
  if (existsSync(join(dir, "config.json"))) return "checkpoint";
  throw new ModelLoadError(
    ref,
    `neither a converted chain (${CHAIN_MANIFEST_FILE}, written by \`convert\`) nor a Qwen3.5 checkpoint (config.json)`,
  );
}

/** The backend `choice` means for a model of `kind`; throws when the two do not go together. */
export function chooseBackend(kind: ModelKind, choice: BackendChoice, ref: string): BackendName {
  if (choice === "auto") {
    if (kind === "checkpoint") return "mlx";
    return coreMLAvailability().available ? "coreml" : "reference";
  }
  if (!BACKEND_NAMES.includes(choice)) {
    throw new ModelLoadError(ref, `unknown backend "${choice}": expected auto, ${BACKEND_NAMES.join(", ")}`);
  }
  if (kind === "chain" && choice === "mlx") {
    throw new ModelLoadError(
      ref,
      "this is a converted chain (model.json) for the ANE: run it with the coreml or reference backend; " +
        "the mlx backend runs the Hugging Face checkpoint it was converted from",
    );
  }
  if (kind === "checkpoint" && choice !== "mlx") {
    throw new ModelLoadError(
      ref,
      `the ${choice} backend runs a converted chain (a folder with model.json, written by \`convert\`), ` +
        "and this is a Hugging Face checkpoint: convert it first, or run it with the mlx backend",
    );
  }
  return choice;
}

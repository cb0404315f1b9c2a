/** safetensors through MLX's reader and writer. */
import { randomBytes } from "node:crypto";
import { renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { type MxArray, native } from "./native.js";
import { track } from "./tidy.js";

export interface SafetensorsContents {
  arrays: Record<string, MxArray>;
  metadata: Record<string, string>;
}

/**
 * Opens a .safetensors file. Arrays are lazy: MLX reads each tensor when it is first evaluated, so
 * the file must stay in place while they are in use.
 */
export function loadSafetensors(path: string): SafetensorsContents {
  const out = native().loadSafetensors(path);
  track(Object.values(out.arrays));
  return out;
}

/** Writes `arrays` (evaluated as needed) atomically: a temp file in the same directory, then rename. */
export function saveSafetensors(
  path: string,
  arrays: Record<string, MxArray>,
  metadata: Record<string, string> = {},
): void {
  // MLX appends ".safetensors" to names without it, so the temp name keeps that suffix.
  const temp = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp.safetensors`);
  try {
    native().saveSafetensors(temp, arrays, metadata);
    renameSync(temp, path);
  } catch (error) {
    rmSync(temp, { force: true });
    throw error;
  }
}

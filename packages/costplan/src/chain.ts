/**
 * What to cost: one .mlpackage, a chain (a converted model folder: model.json listing its
 * components in call order, or else the folder's .mlpackage files in natural name order), an
 * in-memory MlModel, or an in-memory chain of MlModels. A chain runs each component once per
 * decoded token.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { type MlModel, readMlPackage } from "@anemll-qwen35/ir/mil";
import { z } from "zod";
import { ChainError } from "./errors.js";

export interface ChainComponent {
  readonly name: string;
  readonly path?: string;
  readonly model: MlModel;
  /** Function one decode step calls; default: the model's default function, "main", or the first. */
  readonly function?: string;
  /**
   * Run on the host, not through Core ML (the converter's embed package: runtime-ane reads its
   * table on the host): no prediction is costed for it.
   */
  readonly host?: boolean;
}

/** An in-memory chain (e.g. programs built with MilBuilder). */
export interface ChainInput {
  readonly name: string;
  readonly components: readonly ChainComponent[];
}

export interface Target {
  readonly kind: "package" | "chain" | "model";
  readonly name: string;
  readonly path?: string;
  readonly components: readonly ChainComponent[];
}

/** The part of the converter's model.json this package reads; other fields are ignored. */
export const ModelJsonSchema = z.looseObject({
  components: z
    .array(
      z.looseObject({
        // a package inside the model folder: model.json is input, and may come from anyone
        file: z
          .string()
          .regex(/^[^/\\]+$/, "must be a .mlpackage name inside the model folder (no / or \\)")
          .refine((f) => f !== "." && f !== "..", "must be a .mlpackage name inside the model folder"),
        function: z.string().min(1).optional(),
        name: z.string().min(1).optional(),
        kind: z.string().optional(),
      }),
    )
    .min(1),
});

export function isChainInput(x: unknown): x is ChainInput {
  return (
    typeof x === "object" && x !== null && "components" in x && Array.isArray((x as ChainInput).components)
  );
}

function packageName(path: string): string {
  return basename(path).replace(/\.mlpackage$/, "");
}

async function readPackage(path: string): Promise<MlModel> {
  return readMlPackage(path);
}

async function isDir(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined))?.isDirectory() ?? false;
}

export async function loadTarget(target: string | MlModel | ChainInput): Promise<Target> {
  if (typeof target !== "string") {
    if (isChainInput(target)) return { kind: "chain", name: target.name, components: target.components };
    return { kind: "model", name: "model", components: [{ name: "model", model: target }] };
  }
  let path = resolve(target);
  const st = await stat(path).catch(() => undefined);
  if (!st)
    throw new ChainError(
      path,
      "does not exist (expected a .mlpackage, a converted model folder or its model.json)",
    );
  if (st.isFile() && basename(path) === "model.json") path = dirname(path);
  else if (!st.isDirectory()) {
    throw new ChainError(
      path,
      "is a file; expected a .mlpackage directory, a converted model folder or its model.json",
    );
  }
  if (path.endsWith(".mlpackage")) {
    return {
      kind: "package",
      name: packageName(path),
      path,
      components: [{ name: packageName(path), path, model: await readPackage(path) }],
    };
  }
  if (path.endsWith(".mlmodelc")) {
    throw new ChainError(
      path,
      "a compiled .mlmodelc cannot be read statically; point at the .mlpackage it was compiled from",
    );
  }
  const manifest = join(path, "model.json");
  const hasManifest = (await stat(manifest).catch(() => undefined))?.isFile() ?? false;
  const entries: { file: string; function?: string; name?: string; kind?: string }[] = hasManifest
    ? await readModelJson(manifest)
    : await listPackages(path);
  const components: ChainComponent[] = [];
  for (const e of entries) {
    const file = resolve(path, e.file);
    if (!(await isDir(file)) || !file.endsWith(".mlpackage")) {
      throw new ChainError(
        hasManifest ? manifest : path,
        `component ${e.file} is not a .mlpackage directory${file.endsWith(".mlmodelc") ? " (compiled models cannot be read statically)" : ""}`,
      );
    }
    components.push({
      name: e.name ?? packageName(file),
      path: file,
      model: await readPackage(file),
      function: e.function,
      // runtime-ane reads the embed package's table on the host (host-embedding.ts)
      host: e.kind === "embed" ? true : undefined,
    });
  }
  return { kind: "chain", name: basename(path), path, components };
}

async function readModelJson(
  file: string,
): Promise<{ file: string; function?: string; name?: string; kind?: string }[]> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(file, "utf8"));
  } catch (cause) {
    throw new ChainError(file, `is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  const r = ModelJsonSchema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ChainError(
      file,
      `${issue.path.join(".") || "(root)"}: ${issue.message} (expected {components: [{file, function?}]})`,
    );
  }
  return r.data.components;
}

async function listPackages(dir: string): Promise<{ file: string }[]> {
  const names = (await readdir(dir))
    .filter((n) => n.endsWith(".mlpackage"))
    .sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  if (names.length === 0) throw new ChainError(dir, "has no model.json and no .mlpackage files");
  return names.map((file) => ({ file }));
}

/**
 * `Manifest.json` of a .mlpackage, as coremltools writes it (shared/reference/coreml-format.md §1.1):
 * two items under author com.apple.CoreML — the weights directory ("weights", found by name +
 * author by coremltools) and the model spec ("model.mlmodel", the package's root model).
 * Item `path` is relative to the package's `Data/` directory.
 */
import { randomUUID } from "node:crypto";
import { MlPackageError } from "./errors.js";

export const MANIFEST_FILE = "Manifest.json";
export const DATA_DIR = "Data";
export const COREML_AUTHOR = "com.apple.CoreML";
export const MODEL_FILE_NAME = "model.mlmodel";
export const WEIGHTS_DIR_NAME = "weights";
export const WEIGHTS_FILE_NAME = "weight.bin";
export const MODEL_ITEM_DESCRIPTION = "CoreML Model Specification";
export const WEIGHTS_ITEM_DESCRIPTION = "CoreML Model Weights";
export const MANIFEST_FORMAT_VERSION = "1.0.0";

export interface ManifestItem {
  readonly author: string;
  readonly description: string;
  readonly name: string;
  /** Relative to `<package>/Data/`. */
  readonly path: string;
}

export interface Manifest {
  readonly fileFormatVersion: string;
  readonly itemInfoEntries: Readonly<Record<string, ManifestItem>>;
  readonly rootModelIdentifier: string;
}

/** A manifest for the coremltools layout, with fresh (uppercase, as on macOS) item identifiers. */
export function createManifest(): Manifest {
  const weightsId = randomUUID().toUpperCase();
  const modelId = randomUUID().toUpperCase();
  return {
    fileFormatVersion: MANIFEST_FORMAT_VERSION,
    itemInfoEntries: {
      [weightsId]: {
        author: COREML_AUTHOR,
        description: WEIGHTS_ITEM_DESCRIPTION,
        name: WEIGHTS_DIR_NAME,
        path: `${COREML_AUTHOR}/${WEIGHTS_DIR_NAME}`,
      },
      [modelId]: {
        author: COREML_AUTHOR,
        description: MODEL_ITEM_DESCRIPTION,
        name: MODEL_FILE_NAME,
        path: `${COREML_AUTHOR}/${MODEL_FILE_NAME}`,
      },
    },
    rootModelIdentifier: modelId,
  };
}

/** JSON text with sorted keys and 4-space indentation (the formatting coremltools' nlohmann JSON uses). */
export function manifestToJson(m: Manifest): string {
  const sortKeys = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (v && typeof v === "object") {
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
      );
    }
    return v;
  };
  return `${JSON.stringify(sortKeys(m), null, 4)}\n`;
}

/**
 * Parses and checks a manifest's structure (ModelPackage::validate rules): a "major.minor.patch"
 * version not newer than 1.0.0, items with all four string keys, a root id naming an item.
 * Whether item paths exist is checked by the package reader.
 */
export function parseManifest(text: string, file: string): Manifest {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new MlPackageError("manifest", file, undefined, `not valid JSON: ${(cause as Error).message}`, {
      cause,
    });
  }
  if (!json || typeof json !== "object" || Array.isArray(json)) {
    throw new MlPackageError("manifest", file, undefined, "must be a JSON object");
  }
  const m = json as Record<string, unknown>;
  const version = m.fileFormatVersion;
  const parts = typeof version === "string" ? version.split(".") : [];
  if (parts.length !== 3 || parts.some((p) => !/^\d+$/.test(p))) {
    throw new MlPackageError(
      "manifest",
      file,
      "fileFormatVersion",
      `fileFormatVersion ${JSON.stringify(version)} is not "major.minor.patch"`,
    );
  }
  const [major, minor, patch] = parts.map(Number);
  if (major > 1 || (major === 1 && (minor > 0 || patch > 0))) {
    throw new MlPackageError(
      "manifest",
      file,
      "fileFormatVersion",
      `fileFormatVersion ${version} is newer than ${MANIFEST_FORMAT_VERSION}`,
    );
  }
  const entries = m.itemInfoEntries;
  if (!entries || typeof entries !== "object" || Array.isArray(entries)) {
    throw new MlPackageError("manifest", file, "itemInfoEntries", "itemInfoEntries must be an object");
  }
  // no prototype: an item id such as "__proto__" is a key like any other
  const items: Record<string, ManifestItem> = Object.create(null);
  for (const [id, raw] of Object.entries(entries as Record<string, unknown>)) {
    const item = raw as Record<string, unknown>;
    for (const key of ["path", "name", "author", "description"]) {
      if (!item || typeof item[key] !== "string") {
        throw new MlPackageError("item", file, id, `manifest item ${id} lacks a string "${key}"`);
      }
    }
    items[id] = {
      author: item.author as string,
      description: item.description as string,
      name: item.name as string,
      path: item.path as string,
    };
  }
  const root = m.rootModelIdentifier;
  if (typeof root !== "string" || root === "") {
    throw new MlPackageError("root", file, "rootModelIdentifier", "rootModelIdentifier is missing");
  }
  if (!Object.hasOwn(items, root)) {
    throw new MlPackageError(
      "root",
      file,
      root,
      `rootModelIdentifier ${root} names no item of itemInfoEntries`,
    );
  }
  return { fileFormatVersion: version as string, itemInfoEntries: items, rootModelIdentifier: root };
}

/** The weights-directory item as coremltools finds it (name "weights", author com.apple.CoreML). */
export function findWeightsItem(m: Manifest): [string, ManifestItem] | undefined {
  return Object.entries(m.itemInfoEntries).find(
    ([, it]) => it.name === WEIGHTS_DIR_NAME && it.author === COREML_AUTHOR,
  );
}

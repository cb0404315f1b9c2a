/**
 * Where a .mlpackage's parts are (its manifest) and its digest: plain files and JSON, no protobuf, so
 * that checking a chain's packages (ir/chain's integrity check) does not load the MIL format.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, readdir, readFile, stat } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import { MlPackageError } from "./errors.js";
import {
  DATA_DIR,
  findWeightsItem,
  MANIFEST_FILE,
  type Manifest,
  MODEL_FILE_NAME,
  parseManifest,
  WEIGHTS_DIR_NAME,
} from "./manifest.js";

/** True when something (a file, folder or link) is at `path`. */
export async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** Where the parts of a package are, from its manifest. */
export interface MlPackageLayout {
  readonly path: string;
  readonly manifest: Manifest;
  /** The root model file (model.mlmodel). */
  readonly modelFile: string;
  /** The weights directory (may not exist in packages without weights). */
  readonly weightsDir: string;
}

/** Reads and checks Manifest.json: every item must exist under Data/, the root model must be a file. */
export async function locateMlPackage(path: string): Promise<MlPackageLayout> {
  const pkg = resolve(path);
  const st = await stat(pkg).catch(() => undefined);
  if (!st?.isDirectory())
    throw new MlPackageError("path", pkg, undefined, "not a directory (a .mlpackage is a directory)");
  const manifestFile = join(pkg, MANIFEST_FILE);
  let text: string;
  try {
    text = await readFile(manifestFile, "utf8");
  } catch (cause) {
    throw new MlPackageError("manifest", pkg, MANIFEST_FILE, "Manifest.json is missing or unreadable", {
      cause,
    });
  }
  const manifest = parseManifest(text, manifestFile);
  const dataDir = join(pkg, DATA_DIR);
  for (const [id, item] of Object.entries(manifest.itemInfoEntries)) {
    const target = resolve(dataDir, item.path);
    if (target !== dataDir && !target.startsWith(dataDir + sep)) {
      throw new MlPackageError("item", pkg, id, `item path ${item.path} leaves the package's Data directory`);
    }
    if (!(await exists(target))) {
      throw new MlPackageError(
        "item",
        pkg,
        id,
        `item ${item.name} points at Data/${item.path}, which does not exist`,
      );
    }
  }
  const root = manifest.itemInfoEntries[manifest.rootModelIdentifier];
  const modelFile = resolve(dataDir, root.path);
  if (!(await stat(modelFile)).isFile()) {
    throw new MlPackageError(
      "root",
      pkg,
      manifest.rootModelIdentifier,
      `root model Data/${root.path} is not a file`,
    );
  }
  const weights = findWeightsItem(manifest);
  const weightsDir = weights ? resolve(dataDir, weights[1].path) : join(dirname(modelFile), WEIGHTS_DIR_NAME);
  return { path: pkg, manifest, modelFile, weightsDir };
}

/**
 * SHA-256 (hex) over the package's model file and every file of its weights directory (sorted by
 * name), each framed by its name and size, streamed from disk. Independent of the manifest's
 * random item ids, so equal programs with equal weights give equal digests.
 */
export async function digestMlPackage(path: string, options: { signal?: AbortSignal } = {}): Promise<string> {
  const layout = await locateMlPackage(path);
  const hash = createHash("sha256");
  const files: [string, string][] = [[MODEL_FILE_NAME, layout.modelFile]];
  const weightNames = await readdir(layout.weightsDir).catch(() => [] as string[]);
  for (const name of weightNames.sort())
    files.push([`${WEIGHTS_DIR_NAME}/${name}`, join(layout.weightsDir, name)]);
  for (const [name, file] of files) {
    const st = await stat(file);
    if (!st.isFile()) continue;
    hash.update(`${name}\0${st.size}\0`);
    for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20, signal: options.signal })) {
      hash.update(chunk as Buffer);
    }
    options.signal?.throwIfAborted();
  }
  return hash.digest("hex");
}

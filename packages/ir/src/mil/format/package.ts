/**
 * `.mlpackage` directories (shared/reference/coreml-format.md §1):
 *
 *   Foo.mlpackage/Manifest.json
 *   Foo.mlpackage/Data/com.apple.CoreML/model.mlmodel        Model protobuf (ML Program)
 *   Foo.mlpackage/Data/com.apple.CoreML/weights/weight.bin   MIL blob storage v2
 *
 * Writing is atomic: everything is built in a temporary directory next to the destination and
 * renamed into place at the end (an existing package is replaced only then). Reading checks the
 * manifest, the model, every blob record and the ModelDescription against the program, and
 * returns constants that load their data from weight.bin on demand.
 */
import { randomUUID } from "node:crypto";
import { lstat, mkdir, open, readFile, rename, rm } from "node:fs/promises";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { numel } from "@anemll-qwen35/core";
import type { BlobRef, BlobSink, MilData, MlModel, TensorType } from "../program.js";
import { typeToString } from "../program.js";
import { BlobReader, BlobWriter, DEFAULT_BLOB_FILE_NAME, readBlob, readBlobBytes } from "./blob.js";
import { checkDescription } from "./description.js";
import { checkConstData } from "./elements.js";
import { MilFormatError, MlPackageError } from "./errors.js";
import { exists, locateMlPackage, type MlPackageLayout } from "./layout.js";
import {
  COREML_AUTHOR,
  createManifest,
  DATA_DIR,
  MANIFEST_FILE,
  MODEL_FILE_NAME,
  manifestToJson,
  WEIGHTS_DIR_NAME,
  WEIGHTS_FILE_NAME,
} from "./manifest.js";
import { decodeModelProto, encodeModelProto, type ModelProto } from "./proto.js";
import { type BlobAccess, type BlobConstValue, modelFromProto, modelToProto } from "./serialize.js";

// where a package's parts are, and its digest, live in a module without protobuf (for ir/chain)
export { digestMlPackage, locateMlPackage, type MlPackageLayout } from "./layout.js";

const MODEL_PATH_PREFIX = "@model_path/";

function requirePackagePath(path: string): string {
  if (!path.endsWith(".mlpackage")) {
    throw new MlPackageError("path", path, undefined, "a Core ML package path must end in .mlpackage");
  }
  return resolve(path);
}

async function writeFileSynced(path: string, bytes: Uint8Array | string): Promise<void> {
  const fh = await open(path, "w");
  try {
    await fh.writeFile(bytes);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

export interface MlPackageWriterOptions {
  /** Replace an existing package at the destination (at the very end). Default true. */
  overwrite?: boolean;
  /**
   * Write weights in the background with up to this many bytes queued (see BlobWriterOptions);
   * constants handed to `blobs` must then stay unchanged. Default 0: each is written at once.
   */
  writeBehindBytes?: number;
}

/**
 * Writes one .mlpackage. Create it first, hand `blobs` to a builder as its BlobSink so large
 * constants stream to weight.bin while the program is built, then `finish(model)`:
 *
 *   const w = await MlPackageWriter.create("out/Embed.mlpackage");
 *   const model = buildEmbed(w.blobs);   // consts hold refs returned by w.blobs.write()
 *   await w.finish(model);               // or await w.abort() on failure
 *
 * Inline constants left in the model are written to the weight file too when they qualify.
 */
export class MlPackageWriter {
  /** The destination package path. */
  readonly path: string;
  /** The temporary package being built (next to the destination). */
  readonly tempPath: string;
  private readonly blobWriter: BlobWriter;
  private readonly issued = new WeakSet<BlobRef>();
  /** Constants copied in from another package, by loader, so shared weights are copied once. */
  private readonly copied = new Map<() => MilData, BlobRef>();
  private readonly overwrite: boolean;
  private state: "open" | "finished" | "aborted" = "open";

  private constructor(path: string, tempPath: string, blobWriter: BlobWriter, overwrite: boolean) {
    this.path = path;
    this.tempPath = tempPath;
    this.blobWriter = blobWriter;
    this.overwrite = overwrite;
  }

  static async create(path: string, options: MlPackageWriterOptions = {}): Promise<MlPackageWriter> {
    const dest = requirePackagePath(path);
    const overwrite = options.overwrite ?? true;
    if (await exists(dest)) {
      if (!(await lstat(dest)).isDirectory()) {
        throw new MlPackageError("path", dest, undefined, "destination exists and is not a directory");
      }
      if (!overwrite)
        throw new MlPackageError("path", dest, undefined, "destination exists (overwrite: false)");
    }
    const parent = dirname(dest);
    await mkdir(parent, { recursive: true });
    const tempPath = join(parent, `.${basename(dest)}.tmp-${randomUUID()}`);
    const weightsDir = join(tempPath, DATA_DIR, COREML_AUTHOR, WEIGHTS_DIR_NAME);
    await mkdir(weightsDir, { recursive: true });
    const blobWriter = BlobWriter.create(join(weightsDir, WEIGHTS_FILE_NAME), DEFAULT_BLOB_FILE_NAME, {
      writeBehindBytes: options.writeBehindBytes,
    });
    return new MlPackageWriter(dest, tempPath, blobWriter, overwrite);
  }

  /** Streams constants into this package's weight.bin (use as a builder's BlobSink). */
  get blobs(): BlobSink {
    return {
      write: (type: TensorType, data: MilData): BlobRef => {
        this.requireOpen();
        const ref = this.blobWriter.write(type, data);
        this.issued.add(ref);
        return ref;
      },
    };
  }

  /** Bytes written to weight.bin so far. */
  get weightBytes(): number {
    return this.blobWriter.size;
  }

  /** The weight file being written (inside the temporary package). */
  get weightFile(): string {
    return this.blobWriter.filePath;
  }

  /** Waits until every blob handed over so far is in the weight file. */
  flush(): Promise<void> {
    return this.blobWriter.flush();
  }

  /** Serialises `model`, completes the package and moves it into place. */
  async finish(model: MlModel): Promise<void> {
    this.requireOpen();
    try {
      const proto = modelToProto(model, {
        blobs: this.blobWriter,
        placeBlob: (value, where) => this.placeBlob(value, where),
      });
      await this.blobWriter.flush();
      this.blobWriter.finish({ sync: true });
      const dataDir = join(this.tempPath, DATA_DIR, COREML_AUTHOR);
      await writeFileSynced(join(dataDir, MODEL_FILE_NAME), encodeModelProto(proto));
      await writeFileSynced(join(this.tempPath, MANIFEST_FILE), manifestToJson(createManifest()));
      await this.moveIntoPlace();
      this.state = "finished";
    } catch (e) {
      await this.abort();
      throw e;
    }
  }

  /** Discards the temporary package. Safe to call more than once. */
  async abort(): Promise<void> {
    if (this.state === "finished") return;
    this.state = "aborted";
    this.blobWriter.abort();
    await rm(this.tempPath, { recursive: true, force: true });
  }

  /**
   * A blob constant keeps its ref if this writer's weight file holds exactly that value there;
   * one read from another package (it has `load`) is copied in.
   */
  private placeBlob(value: BlobConstValue, where: string): BlobRef {
    const ref = value.blob;
    const written =
      ref.fileName === this.blobWriter.fileName ? this.blobWriter.lookup(ref.offset) : undefined;
    const holds =
      written !== undefined &&
      written.dtype === value.type.dtype &&
      written.count === numel(value.type.shape);
    const ours = this.issued.has(ref);
    if (holds && (ours || !value.load)) return ref;
    if (value.load && !ours) {
      const done = this.copied.get(value.load);
      if (done) return done;
      const data = value.load();
      checkConstData(value.type, data, where);
      const copy = this.blobWriter.write(value.type, data);
      this.copied.set(value.load, copy);
      return copy;
    }
    const there = written ? `it holds ${written.count} ${written.dtype} there` : "nothing was written there";
    throw new MlPackageError(
      "blob",
      this.path,
      where,
      `constant ${typeToString(value.type)} refers to ${ref.fileName} @ ${ref.offset}, but this package's weight ` +
        `file does not hold that value (${there})${ours ? "" : " and the constant has no load()"}`,
    );
  }

  private async moveIntoPlace(): Promise<void> {
    let old: string | undefined;
    if (await exists(this.path)) {
      if (!this.overwrite)
        throw new MlPackageError("path", this.path, undefined, "destination exists (overwrite: false)");
      old = join(dirname(this.path), `.${basename(this.path)}.old-${randomUUID()}`);
      await rename(this.path, old);
    }
    try {
      await rename(this.tempPath, this.path);
    } catch (cause) {
      if (old) await rename(old, this.path);
      throw new MlPackageError(
        "write",
        this.path,
        undefined,
        `cannot move the package into place: ${(cause as Error).message}`,
        {
          cause,
        },
      );
    }
    if (old) await rm(old, { recursive: true, force: true });
  }

  private requireOpen(): void {
    if (this.state !== "open")
      throw new MlPackageError("write", this.path, undefined, `package writer already ${this.state}`);
  }
}

/** Writes `model` as a package at `path` (atomically; inline constants go to weight.bin when they qualify). */
export async function writeMlPackage(
  path: string,
  model: MlModel,
  options: MlPackageWriterOptions = {},
): Promise<void> {
  const w = await MlPackageWriter.create(path, options);
  await w.finish(model);
}

export interface ReadMlPackageOptions {
  /**
   * Check every blob record (bounds, sentinel, dtype, size) while reading, without reading the
   * payloads. Default true; the payloads are always checked again when loaded.
   */
  verifyBlobs?: boolean;
  /** Run after the structural and description checks, e.g. the MIL type checker. */
  check?: (model: MlModel) => void;
}

/** The Model message of a package (for tools and tests that look below the MlModel). */
export async function readMlPackageProto(
  path: string,
): Promise<{ layout: MlPackageLayout; proto: ModelProto }> {
  const layout = await locateMlPackage(path);
  const bytes = await readFile(layout.modelFile);
  let proto: ModelProto;
  try {
    proto = decodeModelProto(bytes);
  } catch (cause) {
    throw new MlPackageError(
      "model",
      layout.path,
      relative(layout.path, layout.modelFile),
      (cause as Error).message,
      { cause },
    );
  }
  return { layout, proto };
}

/**
 * Reads a package into an MlModel. Blob constants carry `load()` (reading weight.bin lazily, with
 * bounds checks). Throws MlPackageError / DescriptionMismatchError / BlobFormatError.
 */
export async function readMlPackage(path: string, options: ReadMlPackageOptions = {}): Promise<MlModel> {
  const { layout, proto } = await readMlPackageProto(path);
  const modelItem = relative(layout.path, layout.modelFile);
  if (!proto.mlProgram) {
    throw new MlPackageError(
      "not-ml-program",
      layout.path,
      modelItem,
      "the model is not an ML Program (mlProgram is unset)",
    );
  }
  const modelDir = dirname(layout.modelFile);
  const refs: { file: string; offset: number; type: TensorType; where: string }[] = [];
  // One loader per (file, offset, type), so values sharing a blob (e.g. across functions) share it.
  const loaders = new Map<string, BlobAccess>();
  let model: MlModel;
  try {
    model = modelFromProto(proto, {
      blobLoader: (ref, type, where) => {
        const file = resolveBlobFile(layout, modelDir, ref, where);
        refs.push({ file, offset: ref.offset, type, where });
        const key = `${file}\0${ref.offset}\0${type.dtype}\0${type.shape.join(",")}`;
        let access = loaders.get(key);
        if (!access) {
          access = {
            load: () => readBlob(file, ref.offset, type, where),
            readBytes: (into, byteOffset) => readBlobBytes(file, ref.offset, type, into, byteOffset, where),
          };
          loaders.set(key, access);
        }
        return access;
      },
    });
  } catch (cause) {
    if (cause instanceof MlPackageError) throw cause;
    if (cause instanceof MilFormatError) {
      throw new MlPackageError("program", layout.path, modelItem, cause.message, { cause });
    }
    throw cause;
  }
  if (options.verifyBlobs ?? true) verifyBlobRefs(refs);
  try {
    checkDescription(model, proto.description, modelItem);
  } catch (cause) {
    if (cause instanceof MlPackageError) throw cause;
    if (cause instanceof MilFormatError) {
      throw new MlPackageError("io-type", layout.path, modelItem, cause.message, { cause });
    }
    throw cause;
  }
  options.check?.(model);
  return model;
}

function resolveBlobFile(layout: MlPackageLayout, modelDir: string, ref: BlobRef, where: string): string {
  if (!ref.fileName.startsWith(MODEL_PATH_PREFIX)) {
    throw new MlPackageError(
      "blob",
      layout.path,
      where,
      `blob fileName ${ref.fileName} does not start with ${MODEL_PATH_PREFIX}`,
    );
  }
  const file = resolve(modelDir, ref.fileName.slice(MODEL_PATH_PREFIX.length));
  if (!file.startsWith(layout.path + sep)) {
    throw new MlPackageError("blob", layout.path, where, `blob fileName ${ref.fileName} leaves the package`);
  }
  return file;
}

function verifyBlobRefs(
  refs: readonly { file: string; offset: number; type: TensorType; where: string }[],
): void {
  const byFile = new Map<string, (typeof refs)[number][]>();
  for (const r of refs) {
    const list = byFile.get(r.file);
    if (list) list.push(r);
    else byFile.set(r.file, [r]);
  }
  for (const [file, list] of byFile) {
    const reader = BlobReader.open(file);
    try {
      for (const r of list) reader.check(r.offset, r.type, r.where);
    } finally {
      reader.close();
    }
  }
}

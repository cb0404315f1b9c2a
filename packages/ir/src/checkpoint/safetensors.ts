/**
 * safetensors: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (padded with
 * spaces), then the data region. The JSON maps tensor names to {dtype, shape, data_offsets}
 * (offsets relative to the data region) plus an optional "__metadata__" string map.
 * Format: https://github.com/huggingface/safetensors (README, "Format"). Limits and checks
 * below follow that spec: the header is capped at 100 MB and the tensors must tile the data
 * region exactly (no overlaps, no holes, nothing after the last tensor).
 *
 * The reader is lazy: the header is read and validated on open, each tensor is read on demand
 * with a positional read at its offset, and the file is never loaded whole.
 */
import type { FileHandle } from "node:fs/promises";
import { open, stat } from "node:fs/promises";
import {
  AnemllError,
  BYTES_PER_ELEMENT,
  type DType,
  numel,
  shapeToString,
  storageFromBytes,
  type Tensor,
  tensor,
  tensorToFloat32,
} from "@anemll-qwen35/core";
import { findDuplicateKeys } from "./json-duplicates.js";

/** Bad or unreadable safetensors data; names the file and, where it applies, the tensor. */
export class SafetensorsError extends AnemllError {
  readonly file: string;
  readonly tensor: string | undefined;
  constructor(file: string, tensor: string | undefined, message: string, options?: { cause?: unknown }) {
    super(
      "E_SAFETENSORS",
      `${file}${tensor === undefined ? "" : ` (tensor "${tensor}")`}: ${message}`,
      options,
    );
    this.file = file;
    this.tensor = tensor;
  }
}

/** The safetensors dtype names this package reads and writes. */
export type SafetensorsDType = "F32" | "F16" | "BF16" | "I8" | "U8" | "I16" | "I32" | "I64" | "BOOL";

export const SAFETENSORS_TO_DTYPE: Readonly<Record<SafetensorsDType, DType>> = {
  F32: "f32",
  F16: "f16",
  BF16: "bf16",
  I8: "i8",
  U8: "u8",
  I16: "i16",
  I32: "i32",
  I64: "i64",
  BOOL: "bool",
};

export const DTYPE_TO_SAFETENSORS: Readonly<Record<DType, SafetensorsDType>> = {
  f32: "F32",
  f16: "F16",
  bf16: "BF16",
  i8: "I8",
  u8: "U8",
  i16: "I16",
  i32: "I32",
  i64: "I64",
  bool: "BOOL",
};

/** Dtypes the format defines that have no ir DType (listed so the error can say "unsupported"). */
const OTHER_FORMAT_DTYPES = [
  "F64",
  "U16",
  "U32",
  "U64",
  "F8_E4M3",
  "F8_E5M2",
  "F8_E8M0",
  "F4",
  "F6_E2M3",
  "F6_E3M2",
];

/** The reference implementation's limit on the JSON header. */
export const MAX_HEADER_BYTES = 100_000_000;

export interface SafetensorsTensorInfo {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Byte length of the tensor's data. */
  readonly byteLength: number;
  /** Absolute byte offset of the tensor's data in its file. */
  readonly fileOffset: number;
  /** The file holding the tensor. */
  readonly file: string;
}

export interface SafetensorsHeader {
  /** `__metadata__`, if present. */
  readonly metadata: Readonly<Record<string, string>> | undefined;
  /** Tensors in data order (ascending offset). */
  readonly tensors: readonly SafetensorsTensorInfo[];
  /** Byte length of the JSON header (N). */
  readonly headerLength: number;
  /** Absolute offset of the data region (8 + N). */
  readonly dataStart: number;
}

/** Read access by name: implemented by a single file and by a whole (sharded) checkpoint. */
export interface TensorSource {
  names(): string[];
  has(name: string): boolean;
  info(name: string): SafetensorsTensorInfo;
  read(name: string): Promise<Tensor>;
  readBytes(name: string): Promise<Uint8Array>;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * A header entry's shape: a list of non-negative integers, else SafetensorsError naming the file and
 * tensor. The one shape check of every safetensors reader here (ir's, and runtime-mlx's before MLX,
 * whose own reader would take 1024.5 as 1024).
 */
export function checkSafetensorsShape(shape: unknown, file: string, name: string): number[] {
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new SafetensorsError(
      file,
      name,
      `shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`,
    );
  }
  return shape;
}

/**
 * Parses and validates a header. `json` is the N header bytes; `fileSize` is the size of the
 * whole file so that offsets can be checked against the data region.
 */
export function parseSafetensorsHeader(json: Uint8Array, file: string, fileSize: number): SafetensorsHeader {
  const headerLength = json.byteLength;
  const dataStart = 8 + headerLength;
  const dataLength = fileSize - dataStart;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(json);
  } catch (cause) {
    throw new SafetensorsError(file, undefined, "header is not valid UTF-8", { cause });
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (cause) {
    const head = text.slice(0, 40).replace(/[^\x20-\x7e]/g, "?");
    throw new SafetensorsError(file, undefined, `header is not JSON (starts with "${head}")`, { cause });
  }
  if (!isObject(parsed)) throw new SafetensorsError(file, undefined, "header JSON is not an object");
  const dup = findDuplicateKeys(text)[0];
  if (dup) {
    const where = dup.path.length ? ` inside "${dup.path.join(".")}"` : "";
    throw new SafetensorsError(
      file,
      dup.path[0] ?? dup.key,
      `duplicate key "${dup.key}"${where} in the header`,
    );
  }

  let metadata: Record<string, string> | undefined;
  const infos: { info: SafetensorsTensorInfo; begin: number; end: number }[] = [];
  for (const [name, entry] of Object.entries(parsed)) {
    if (name === "__metadata__") {
      if (!isObject(entry))
        throw new SafetensorsError(file, undefined, "__metadata__ must be an object of strings");
      for (const [k, v] of Object.entries(entry)) {
        if (typeof v !== "string") {
          throw new SafetensorsError(
            file,
            undefined,
            `__metadata__["${k}"] must be a string, got ${typeof v}`,
          );
        }
      }
      metadata = entry as Record<string, string>;
      continue;
    }
    if (!isObject(entry))
      throw new SafetensorsError(file, name, "entry must be an object {dtype, shape, data_offsets}");
    const { dtype: stDtype, data_offsets: offsets } = entry;
    if (typeof stDtype !== "string") throw new SafetensorsError(file, name, "missing or non-string dtype");
    if (!(stDtype in SAFETENSORS_TO_DTYPE)) {
      const known = Object.keys(SAFETENSORS_TO_DTYPE).join(", ");
      const why = OTHER_FORMAT_DTYPES.includes(stDtype) ? "unsupported dtype" : "unknown dtype";
      throw new SafetensorsError(file, name, `${why} "${stDtype}" (supported: ${known})`);
    }
    const dtype = SAFETENSORS_TO_DTYPE[stDtype as SafetensorsDType];
    const shape = checkSafetensorsShape(entry.shape, file, name);
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) ||
      offsets[0] > offsets[1]
    ) {
      throw new SafetensorsError(
        file,
        name,
        `data_offsets must be [begin, end] with 0 <= begin <= end, got ${JSON.stringify(offsets)}`,
      );
    }
    const [begin, end] = offsets as [number, number];
    const expected = numel(shape) * BYTES_PER_ELEMENT[dtype];
    if (end - begin !== expected) {
      throw new SafetensorsError(
        file,
        name,
        `data_offsets [${begin}, ${end}] span ${end - begin} bytes but ${stDtype} ${shapeToString(shape)} needs ${expected}`,
      );
    }
    if (end > dataLength) {
      throw new SafetensorsError(
        file,
        name,
        `data_offsets [${begin}, ${end}] are out of range: the data region has ${dataLength} bytes (file truncated?)`,
      );
    }
    infos.push({
      info: { name, dtype, shape: [...shape], byteLength: expected, fileOffset: dataStart + begin, file },
      begin,
      end,
    });
  }

  // The tensors must tile [0, dataLength) exactly.
  infos.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let covered = 0;
  let previous: string | undefined;
  for (const { info, begin, end } of infos) {
    if (begin < covered) {
      throw new SafetensorsError(
        file,
        info.name,
        `data_offsets [${begin}, ${end}] overlap tensor "${previous}" (which ends at ${covered})`,
      );
    }
    if (begin > covered) {
      throw new SafetensorsError(
        file,
        info.name,
        `data region bytes [${covered}, ${begin}) before this tensor belong to no tensor (offsets must be contiguous)`,
      );
    }
    covered = end;
    previous = info.name;
  }
  if (covered !== dataLength) {
    throw new SafetensorsError(
      file,
      undefined,
      `tensors cover ${covered} bytes of the data region but it has ${dataLength} (${dataLength - covered} trailing bytes belong to no tensor)`,
    );
  }
  return { metadata, tensors: infos.map((x) => x.info), headerLength, dataStart };
}

/** Reads exactly `target.byteLength` bytes at `position` (positional reads may return short). */
async function readSpan(
  fh: FileHandle,
  target: Uint8Array,
  offset: number,
  length: number,
  position: number,
  file: string,
  tensorName?: string,
) {
  let done = 0;
  while (done < length) {
    const { bytesRead } = await fh.read(target, offset + done, length - done, position + done);
    if (bytesRead === 0) {
      throw new SafetensorsError(file, tensorName, `unexpected end of file at byte ${position + done}`);
    }
    done += bytesRead;
  }
}

/** Chunk size and reads in flight for large tensors: parallel preads keep more than one core copying. */
const READ_CHUNK = 16 << 20;
const READS_IN_FLIGHT = 4;

/** Fills `target` from the file starting at `position`; large spans are read as parallel chunks. */
export async function readFully(
  fh: FileHandle,
  target: Uint8Array,
  position: number,
  file: string,
  tensorName?: string,
): Promise<void> {
  const total = target.byteLength;
  if (total <= 2 * READ_CHUNK) return readSpan(fh, target, 0, total, position, file, tensorName);
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const offset = next;
      next += READ_CHUNK;
      await readSpan(
        fh,
        target,
        offset,
        Math.min(READ_CHUNK, total - offset),
        position + offset,
        file,
        tensorName,
      );
    }
  };
  await Promise.all(Array.from({ length: READS_IN_FLIGHT }, worker));
}

/**
 * A fresh, unshared buffer that is not zero-filled first (it is overwritten by the read at
 * once; skipping the fill saves a full pass over memory on multi-hundred-MB tensors).
 */
function uninitializedBytes(n: number): Uint8Array {
  const b = Buffer.allocUnsafeSlow(n);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** One .safetensors file, opened lazily. */
export class SafetensorsFile implements TensorSource, AsyncDisposable {
  readonly path: string;
  readonly header: SafetensorsHeader;
  readonly fileSize: number;
  private fh: FileHandle | undefined;
  private readonly byName: Map<string, SafetensorsTensorInfo>;

  private constructor(path: string, fh: FileHandle, header: SafetensorsHeader, fileSize: number) {
    this.path = path;
    this.fh = fh;
    this.header = header;
    this.fileSize = fileSize;
    this.byName = new Map(header.tensors.map((t) => [t.name, t]));
  }

  /** Opens `path` and reads and validates its header; throws SafetensorsError on bad input. */
  static async open(path: string): Promise<SafetensorsFile> {
    let fh: FileHandle;
    try {
      // a named pipe or device would block open() (or the reads) forever: only regular files
      if (!(await stat(path)).isFile()) {
        throw new SafetensorsError(path, undefined, "is not a regular file (a folder, pipe or device)");
      }
      fh = await open(path, "r");
    } catch (cause) {
      if (cause instanceof SafetensorsError) throw cause;
      throw new SafetensorsError(path, undefined, `cannot open: ${(cause as Error).message}`, { cause });
    }
    try {
      const { size } = await fh.stat();
      if (size < 8) {
        throw new SafetensorsError(
          path,
          undefined,
          `file is ${size} bytes; a safetensors file starts with an 8-byte header length`,
        );
      }
      const lenBytes = new Uint8Array(8);
      await readFully(fh, lenBytes, 0, path);
      const n = new DataView(lenBytes.buffer).getBigUint64(0, true);
      if (n > BigInt(MAX_HEADER_BYTES)) {
        throw new SafetensorsError(
          path,
          undefined,
          `header length ${n} exceeds the ${MAX_HEADER_BYTES}-byte limit`,
        );
      }
      if (8n + n > BigInt(size)) {
        throw new SafetensorsError(
          path,
          undefined,
          `header length ${n} runs past the end of the file (${size} bytes)`,
        );
      }
      const json = new Uint8Array(Number(n));
      await readFully(fh, json, 8, path);
      const header = parseSafetensorsHeader(json, path, size);
      return new SafetensorsFile(path, fh, header, size);
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  get metadata(): Readonly<Record<string, string>> | undefined {
    return this.header.metadata;
  }

  /** Tensor names in data order. */
  names(): string[] {
    return this.header.tensors.map((t) => t.name);
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  info(name: string): SafetensorsTensorInfo {
    const info = this.byName.get(name);
    if (!info) throw new SafetensorsError(this.path, name, "no such tensor in this file");
    return info;
  }

  /** The tensor's raw little-endian bytes (a fresh buffer). */
  async readBytes(name: string): Promise<Uint8Array> {
    const info = this.info(name);
    const out = uninitializedBytes(info.byteLength);
    await readFully(this.handle(name), out, info.fileOffset, this.path, name);
    return out;
  }

  /**
   * Reads the tensor's bytes into `target` (at least byteLength bytes) and returns the filled
   * view. Lets a caller that processes tensors one at a time reuse one buffer, which avoids
   * faulting in fresh memory for every tensor.
   */
  async readInto(name: string, target: Uint8Array): Promise<Uint8Array> {
    const info = this.info(name);
    if (target.byteLength < info.byteLength) {
      throw new SafetensorsError(
        this.path,
        name,
        `target has ${target.byteLength} bytes, the tensor needs ${info.byteLength}`,
      );
    }
    const view = target.subarray(0, info.byteLength);
    await readFully(this.handle(name), view, info.fileOffset, this.path, name);
    return view;
  }

  /** Reads `length` bytes starting `start` bytes into the tensor's data (for chunked copies). */
  async readRange(name: string, start: number, length: number): Promise<Uint8Array> {
    const info = this.info(name);
    if (start < 0 || length < 0 || start + length > info.byteLength) {
      throw new SafetensorsError(
        this.path,
        name,
        `range [${start}, ${start + length}) outside its ${info.byteLength} bytes`,
      );
    }
    const out = uninitializedBytes(length);
    await readFully(this.handle(name), out, info.fileOffset + start, this.path, name);
    return out;
  }

  /** The tensor in its stored dtype. */
  async read(name: string): Promise<Tensor> {
    const info = this.info(name);
    const bytes = await this.readBytes(name);
    return tensor(info.dtype, info.shape, storageFromBytes(info.dtype, bytes));
  }

  /** The tensor converted to fp32. */
  async readFloat32(name: string): Promise<Tensor<"f32">> {
    const t = await this.read(name);
    return t.dtype === "f32" ? (t as Tensor<"f32">) : tensor("f32", t.shape, tensorToFloat32(t));
  }

  async close(): Promise<void> {
    const fh = this.fh;
    this.fh = undefined;
    await fh?.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private handle(name: string): FileHandle {
    if (!this.fh) throw new SafetensorsError(this.path, name, "file is closed");
    return this.fh;
  }
}

/**
 * Deterministic, streaming safetensors writer.
 *
 * The shapes and dtypes of all tensors are declared up front, so the header (and with it every
 * tensor's offset) is fixed before any data is written; tensor data then arrives one tensor, or
 * one chunk, at a time and goes straight to its offset with a positional write. Nothing bigger
 * than the chunk the caller hands in is held in memory.
 *
 * Layout order (= header key order = data order), chosen with `order`:
 * - "name" (default): tensors sorted by name (code-unit order), so the same set of tensors
 *   always gives the same bytes whatever order the caller declared them in;
 * - "given": the caller's declaration order;
 * - "aligned": larger element sizes first, then by name, so every tensor's data offset is a
 *   multiple of its element size (what the reference Rust writer does; nice for mmap readers).
 * `__metadata__` is written first. The header is padded with spaces to a multiple of 8 bytes.
 *
 * The file is written to a temp path next to the destination and renamed on close().
 */
import type { FileHandle } from "node:fs/promises";
import { mkdir, open, rename, rm } from "node:fs/promises";
import { dirname } from "node:path";
import {
  BYTES_PER_ELEMENT,
  type DType,
  numel,
  sameShape,
  shapeToString,
  storageBytes,
  type Tensor,
} from "@anemll-qwen35/core";
import { tempSiblingPath } from "./atomic.js";
import { DTYPE_TO_SAFETENSORS, MAX_HEADER_BYTES, SafetensorsError } from "./safetensors.js";

export interface TensorSpec {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
}

export type TensorOrder = "name" | "given" | "aligned";

export interface SafetensorsWriteOptions {
  metadata?: Record<string, string>;
  order?: TensorOrder;
  /** fsync before the rename (default true). */
  fsync?: boolean;
}

interface Slot {
  spec: TensorSpec;
  byteLength: number;
  offset: number; // absolute
  written: number;
}

export function orderSpecs(specs: readonly TensorSpec[], order: TensorOrder): TensorSpec[] {
  const byName = (a: TensorSpec, b: TensorSpec) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  if (order === "given") return [...specs];
  if (order === "name") return [...specs].sort(byName);
  return [...specs].sort((a, b) => BYTES_PER_ELEMENT[b.dtype] - BYTES_PER_ELEMENT[a.dtype] || byName(a, b));
}

export function specByteLength(spec: TensorSpec): number {
  return numel(spec.shape) * BYTES_PER_ELEMENT[spec.dtype];
}

/** Builds the padded header bytes for specs already in layout order. */
export function encodeSafetensorsHeader(
  ordered: readonly TensorSpec[],
  metadata: Record<string, string> | undefined,
  file = "<header>",
): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== "string")
        throw new SafetensorsError(file, undefined, `metadata "${k}" must be a string`);
    }
    header.__metadata__ = metadata;
  }
  let offset = 0;
  for (const spec of ordered) {
    const size = specByteLength(spec);
    header[spec.name] = {
      dtype: DTYPE_TO_SAFETENSORS[spec.dtype],
      shape: [...spec.shape],
      data_offsets: [offset, offset + size],
    };
    offset += size;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.byteLength / 8) * 8;
  if (padded > MAX_HEADER_BYTES)
    throw new SafetensorsError(
      file,
      undefined,
      `header would be ${padded} bytes (limit ${MAX_HEADER_BYTES})`,
    );
  const out = new Uint8Array(8 + padded).fill(0x20);
  new DataView(out.buffer).setBigUint64(0, BigInt(padded), true);
  out.set(json, 8);
  return out;
}

function validateSpecs(path: string, specs: readonly TensorSpec[]): void {
  const seen = new Set<string>();
  for (const s of specs) {
    if (s.name === "__metadata__") throw new SafetensorsError(path, s.name, "tensor name is reserved");
    if (seen.has(s.name)) throw new SafetensorsError(path, s.name, "declared twice");
    seen.add(s.name);
    if (!(s.dtype in DTYPE_TO_SAFETENSORS))
      throw new SafetensorsError(path, s.name, `unknown dtype ${s.dtype}`);
    if (!s.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new SafetensorsError(path, s.name, `invalid shape ${shapeToString(s.shape)}`);
    }
  }
}

export class SafetensorsWriter implements AsyncDisposable {
  /** Total file size once complete. */
  readonly fileSize: number;
  private readonly slots = new Map<string, Slot>();
  private state: "open" | "closed" | "aborted" = "open";

  private constructor(
    readonly path: string,
    private readonly tmpPath: string,
    private fh: FileHandle | undefined,
    /** Tensors in layout order. */
    readonly specs: readonly TensorSpec[],
    header: Uint8Array,
    private readonly fsync: boolean,
  ) {
    let offset = header.byteLength;
    for (const spec of specs) {
      const byteLength = specByteLength(spec);
      this.slots.set(spec.name, { spec, byteLength, offset, written: 0 });
      offset += byteLength;
    }
    this.fileSize = offset;
  }

  /** Creates the temp file and writes the header. */
  static async create(
    path: string,
    specs: readonly TensorSpec[],
    options: SafetensorsWriteOptions = {},
  ): Promise<SafetensorsWriter> {
    validateSpecs(path, specs);
    const ordered = orderSpecs(specs, options.order ?? "name");
    const header = encodeSafetensorsHeader(ordered, options.metadata, path);
    await mkdir(dirname(path), { recursive: true });
    const tmp = tempSiblingPath(path);
    const fh = await open(tmp, "wx");
    try {
      await fh.write(header, 0, header.byteLength, 0);
    } catch (err) {
      await fh.close().catch(() => {});
      await rm(tmp, { force: true });
      throw err;
    }
    return new SafetensorsWriter(path, tmp, fh, ordered, header, options.fsync ?? true);
  }

  /** Writes a whole tensor; its dtype and shape must match the declaration. */
  async write(name: string, t: Tensor): Promise<void> {
    const slot = this.slot(name);
    if (t.dtype !== slot.spec.dtype || !sameShape(t.shape, slot.spec.shape)) {
      throw new SafetensorsError(
        this.path,
        name,
        `declared ${slot.spec.dtype} ${shapeToString(slot.spec.shape)} but got ${t.dtype} ${shapeToString(t.shape)}`,
      );
    }
    if (slot.written !== 0) throw new SafetensorsError(this.path, name, "already (partly) written");
    await this.writeBytes(name, storageBytes(t.data));
  }

  /** Appends raw little-endian bytes to the tensor's data; chunks of one tensor arrive in order. */
  async writeBytes(name: string, bytes: Uint8Array): Promise<void> {
    const slot = this.slot(name);
    if (slot.written + bytes.byteLength > slot.byteLength) {
      throw new SafetensorsError(
        this.path,
        name,
        `got ${slot.written + bytes.byteLength} bytes for a ${slot.byteLength}-byte tensor`,
      );
    }
    const fh = this.fh!;
    let done = 0;
    while (done < bytes.byteLength) {
      const { bytesWritten } = await fh.write(
        bytes,
        done,
        bytes.byteLength - done,
        slot.offset + slot.written + done,
      );
      done += bytesWritten;
    }
    slot.written += bytes.byteLength;
  }

  /** Bytes still expected for `name`. */
  remaining(name: string): number {
    const slot = this.slot(name);
    return slot.byteLength - slot.written;
  }

  /** Checks every tensor is complete, then fsyncs and renames the temp file into place. */
  async close(): Promise<void> {
    if (this.state !== "open")
      throw new SafetensorsError(this.path, undefined, `writer already ${this.state}`);
    for (const slot of this.slots.values()) {
      if (slot.written !== slot.byteLength) {
        await this.abort();
        throw new SafetensorsError(
          this.path,
          slot.spec.name,
          `incomplete: ${slot.written} of ${slot.byteLength} bytes written; nothing was saved`,
        );
      }
    }
    const fh = this.fh!;
    try {
      if (this.fsync) await fh.sync();
      await fh.close();
      this.fh = undefined;
      await rename(this.tmpPath, this.path);
    } catch (err) {
      await this.abort();
      throw err;
    }
    this.state = "closed";
  }

  /** Discards the temp file. Safe to call more than once. */
  async abort(): Promise<void> {
    if (this.state === "closed") return;
    this.state = "aborted";
    const fh = this.fh;
    this.fh = undefined;
    await fh?.close().catch(() => {});
    await rm(this.tmpPath, { force: true });
  }

  /** Aborts unless close() already succeeded, so `await using` never leaves a partial file. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.abort();
  }

  private slot(name: string): Slot {
    if (this.state !== "open") throw new SafetensorsError(this.path, name, `writer already ${this.state}`);
    const slot = this.slots.get(name);
    if (!slot) throw new SafetensorsError(this.path, name, "not declared when the writer was created");
    return slot;
  }
}

/** A tensor to write together with its name. */
export interface NamedTensor {
  readonly name: string;
  readonly tensor: Tensor;
}

/**
 * Writes tensors from an (async) iterable into `path`. `specs` declares every tensor up front
 * (the stream is consumed one tensor at a time, so a multi-GB file never sits in memory); when
 * `specs` is omitted the source must be an array (in-memory tensors).
 */
export async function writeSafetensors(
  path: string,
  source: readonly NamedTensor[] | Iterable<NamedTensor> | AsyncIterable<NamedTensor>,
  options: SafetensorsWriteOptions & { specs?: readonly TensorSpec[] } = {},
): Promise<void> {
  let specs = options.specs;
  if (!specs) {
    if (!Array.isArray(source)) {
      throw new SafetensorsError(
        path,
        undefined,
        "streaming sources need `specs` (names, dtypes, shapes) up front",
      );
    }
    specs = (source as readonly NamedTensor[]).map(({ name, tensor: t }) => ({
      name,
      dtype: t.dtype,
      shape: t.shape,
    }));
  }
  const writer = await SafetensorsWriter.create(path, specs, options);
  try {
    for await (const { name, tensor: t } of source) await writer.write(name, t);
    await writer.close();
  } catch (err) {
    await writer.abort();
    throw err;
  }
}

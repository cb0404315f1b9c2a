/**
 * MIL blob storage v2 (`weight.bin`), byte-exact to coremltools' StorageWriter/StorageReader
 * (shared/reference/coreml-format.md §3):
 *
 *   storage_header  @0, 64 B: count u32 · version u32 (=2) · 56 zero bytes
 *   per blob        @roundUp(fileSize, 64): blob_metadata 64 B
 *                     sentinel u32 0xDEADBEEF · mil_dtype u32 (BlobDataType) · sizeInBytes u64 ·
 *                     offset u64 (payload = metadata + 64) · padding_size_in_bits u64 · 32 zero bytes
 *                   then the payload; no padding after the last payload.
 *
 * A blob is addressed by its metadata offset (that is what `BlobFileValue.offset` holds).
 * The writer appends to an open file (never holding the file in memory) and patches the count
 * at the end; the reader checks every offset and size against the file before reading. With
 * `writeBehindBytes`, blobs are written in the background (offsets are fixed when a blob is
 * handed over, so the file is the same) while the caller computes the next one.
 */
import { createHash } from "node:crypto";
import { closeSync, fstatSync, fsyncSync, openSync, readSync, writeSync, writev } from "node:fs";
import { numel } from "@anemll-qwen35/core";
import type { BlobRef, BlobSink, MilData, MilDType, TensorType } from "../program.js";
import { BLOB_DATA_TYPE, blobDTypeFromCode, SUB_BYTE_BITS } from "./dtypes.js";
import { byteSizeOf, checkConstData, elementsFromBytes, elementsToBytes, paddingBitsOf } from "./elements.js";
import { BlobFormatError } from "./errors.js";

/** The `BlobFileValue.fileName` of the single weight file coremltools writes. */
export const DEFAULT_BLOB_FILE_NAME = "@model_path/weights/weight.bin";

export const BLOB_HEADER_SIZE = 64;
export const BLOB_METADATA_SIZE = 64;
export const BLOB_ALIGNMENT = 64;
export const BLOB_SENTINEL = 0xdeadbeef;
export const BLOB_STORAGE_VERSION = 2;

/** One blob_metadata record, decoded. */
export interface BlobMetadata {
  /** Offset of this record (the blob's address). */
  readonly offset: number;
  readonly dtypeCode: number;
  /** undefined for codes this project does not model (fp8). */
  readonly dtype: MilDType | undefined;
  readonly sizeInBytes: number;
  readonly payloadOffset: number;
  readonly paddingBits: number;
}

/** What was written at one offset (kept by the writer so refs can be checked later). */
export interface WrittenBlob {
  readonly dtype: MilDType;
  readonly count: number;
}

function writeAll(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) {
    done += writeSync(fd, bytes, done, bytes.length - done, position + done);
  }
}

function readAll(fd: number, into: Uint8Array, position: number): number {
  const MAX_CHUNK = 1 << 30; // readSync lengths must stay below 2 GiB
  let done = 0;
  while (done < into.length) {
    const n = readSync(fd, into, done, Math.min(MAX_CHUNK, into.length - done), position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

export interface BlobWriterOptions {
  /**
   * Write blobs in the background, keeping at most this many bytes queued (beyond that, a write
   * waits for the disk). 0 (the default) writes each blob before `write` returns. Data handed to
   * `write` must then stay unchanged until `flush()`.
   */
  readonly writeBehindBytes?: number;
}

/**
 * Streams blobs into a weight file. Use it as the `BlobSink` of a builder so constants go to disk
 * as they are made; call `finish()` once to patch the header and close the file.
 */
export class BlobWriter implements BlobSink {
  readonly filePath: string;
  /** The `BlobFileValue.fileName` written into refs. */
  readonly fileName: string;
  private fd: number | undefined;
  private end = BLOB_HEADER_SIZE;
  private readonly written = new Map<number, WrittenBlob>();
  /** dtype, count and sha256 of each blob's payload → its metadata offset. */
  private readonly byContent = new Map<string, number>();
  private readonly writeBehindBytes: number;
  private queuedBytes = 0;
  private pending = new Set<Promise<void>>();
  private failure: Error | undefined;

  private constructor(filePath: string, fileName: string, fd: number, writeBehindBytes: number) {
    this.filePath = filePath;
    this.fileName = fileName;
    this.fd = fd;
    this.writeBehindBytes = writeBehindBytes;
  }

  /** Creates (truncates) `filePath` and writes a provisional header (count patched by finish). */
  static create(
    filePath: string,
    fileName: string = DEFAULT_BLOB_FILE_NAME,
    options: BlobWriterOptions = {},
  ): BlobWriter {
    let fd: number;
    try {
      fd = openSync(filePath, "w");
    } catch (cause) {
      throw new BlobFormatError("io", filePath, 0, `cannot create weight file: ${(cause as Error).message}`, {
        cause,
      });
    }
    const w = new BlobWriter(filePath, fileName, fd, options.writeBehindBytes ?? 0);
    writeAll(fd, w.header(), 0);
    return w;
  }

  /** Number of blobs written so far. */
  get count(): number {
    return this.written.size;
  }

  /** Current file size in bytes. */
  get size(): number {
    return this.end;
  }

  get closed(): boolean {
    return this.fd === undefined;
  }

  /** What was written at a metadata offset, if this writer wrote it. */
  lookup(offset: number): WrittenBlob | undefined {
    return this.written.get(offset);
  }

  /**
   * Writes a constant and returns its ref (BlobSink). Sub-byte types are packed LSB-first.
   * Content-addressed: a constant with the same dtype, count and bytes as one already written
   * gets that blob's ref, so functions of one package that hold the same weight store it once.
   */
  write(type: TensorType, data: MilData): BlobRef {
    checkConstData(type, data, `blob ${this.written.size} in ${this.filePath}`);
    const payload = elementsToBytes(type.dtype, data);
    const count = numel(type.shape);
    const key = `${type.dtype}:${count}:${createHash("sha256").update(payload).digest("base64")}`;
    let offset = this.byContent.get(key);
    if (offset === undefined) {
      offset = this.writeBytes(type.dtype, payload, count);
      this.byContent.set(key, offset);
    }
    return { fileName: this.fileName, offset };
  }

  /**
   * Appends one blob whose payload is already in byte form (packed for sub-byte types) and returns
   * its metadata offset.
   */
  writeBytes(dtype: MilDType, payload: Uint8Array, count: number): number {
    const fd = this.requireOpen();
    const code = BLOB_DATA_TYPE[dtype];
    if (code === undefined) {
      throw new BlobFormatError(
        "dtype",
        this.filePath,
        this.end,
        `${dtype} cannot be stored in a weight file`,
      );
    }
    const expected = byteSizeOf(dtype, count);
    if (payload.length !== expected) {
      throw new BlobFormatError(
        "size",
        this.filePath,
        this.end,
        `${count} ${dtype} elements need ${expected} payload bytes, got ${payload.length}`,
      );
    }
    const start = this.end;
    const metadataOffset = Math.ceil(start / BLOB_ALIGNMENT) * BLOB_ALIGNMENT;
    const md = new Uint8Array(BLOB_METADATA_SIZE);
    const v = new DataView(md.buffer);
    v.setUint32(0, BLOB_SENTINEL, true);
    v.setUint32(4, code, true);
    v.setBigUint64(8, BigInt(payload.length), true);
    v.setBigUint64(16, BigInt(metadataOffset + BLOB_METADATA_SIZE), true);
    v.setBigUint64(24, BigInt(paddingBitsOf(dtype, count)), true);
    // the alignment gap, the metadata and the payload, contiguous from `start`
    const parts = [new Uint8Array(metadataOffset - start), md, payload];
    const bytes = metadataOffset - start + BLOB_METADATA_SIZE + payload.length;
    this.end = metadataOffset + BLOB_METADATA_SIZE + payload.length;
    this.written.set(metadataOffset, { dtype, count });
    if (this.queuedBytes + bytes > this.writeBehindBytes) {
      writeParts(fd, parts, start);
    } else {
      // regions never overlap, so background writes may complete in any order
      this.queuedBytes += bytes;
      const done: Promise<void> = new Promise<void>((resolve) => {
        writeBehind(fd, parts, start, (err) => {
          this.queuedBytes -= bytes;
          this.pending.delete(done);
          if (err)
            this.failure ??= new BlobFormatError("io", this.filePath, start, `write failed: ${err.message}`, {
              cause: err,
            });
          resolve();
        });
      });
      this.pending.add(done);
    }
    return metadataOffset;
  }

  /** Waits for the blobs being written in the background (rejects if one failed). */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.all(this.pending);
    if (this.failure) throw this.failure;
  }

  /**
   * Patches the blob count into the header and closes the file; `sync` also flushes it to disk.
   * Call `flush()` first when writing behind.
   */
  finish(options: { sync?: boolean } = {}): void {
    const fd = this.requireOpen();
    if (this.pending.size > 0) {
      throw new BlobFormatError(
        "io",
        this.filePath,
        this.end,
        "finish() while blobs are still being written (await flush() first)",
      );
    }
    try {
      writeAll(fd, this.header(), 0);
      if (options.sync) fsyncSync(fd);
    } finally {
      closeSync(fd);
      this.fd = undefined;
    }
  }

  /** Closes the file without finishing it (the caller removes it); once background writes are done. */
  abort(): void {
    const fd = this.fd;
    if (fd === undefined) return;
    this.fd = undefined;
    if (this.pending.size === 0) closeSync(fd);
    else void Promise.all(this.pending).then(() => closeSync(fd));
  }

  private header(): Uint8Array {
    const h = new Uint8Array(BLOB_HEADER_SIZE);
    const v = new DataView(h.buffer);
    v.setUint32(0, this.written.size, true);
    v.setUint32(4, BLOB_STORAGE_VERSION, true);
    return h;
  }

  private requireOpen(): number {
    if (this.fd === undefined) {
      throw new BlobFormatError("io", this.filePath, this.end, "weight file already finished or aborted");
    }
    if (this.failure) throw this.failure;
    return this.fd;
  }
}

function writeParts(fd: number, parts: Uint8Array[], position: number): void {
  let at = position;
  for (const p of parts) {
    writeAll(fd, p, at);
    at += p.length;
  }
}

/** writev of `parts` at `position` on the libuv thread pool, resuming short writes. */
function writeBehind(
  fd: number,
  parts: Uint8Array[],
  position: number,
  done: (err: Error | null) => void,
): void {
  const rest = parts.filter((p) => p.length > 0);
  if (rest.length === 0) {
    done(null);
    return;
  }
  writev(fd, rest, position, (err, n) => {
    if (err) {
      done(err);
      return;
    }
    let left = n;
    const remaining: Uint8Array[] = [];
    for (const p of rest) {
      if (left >= p.length) left -= p.length;
      else {
        remaining.push(p.subarray(left));
        left = 0;
      }
    }
    writeBehind(fd, remaining, position + n, done);
  });
}

function u64(v: DataView, at: number, file: string, offset: number, field: string): number {
  const big = v.getBigUint64(at, true);
  if (big > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new BlobFormatError("offset", file, offset, `${field} ${big} is out of range`);
  }
  return Number(big);
}

/** Reads blobs from a weight file, checking each record against the file and the requested type. */
export class BlobReader {
  readonly filePath: string;
  readonly fileSize: number;
  /** Blob count from the header. */
  readonly count: number;
  private fd: number | undefined;

  private constructor(filePath: string, fd: number, fileSize: number, count: number) {
    this.filePath = filePath;
    this.fd = fd;
    this.fileSize = fileSize;
    this.count = count;
  }

  /** Opens a weight file and checks its header (size, version 2). */
  static open(filePath: string): BlobReader {
    let fd: number;
    try {
      fd = openSync(filePath, "r");
    } catch (cause) {
      throw new BlobFormatError("io", filePath, 0, `cannot open weight file: ${(cause as Error).message}`, {
        cause,
      });
    }
    try {
      const size = fstatSync(fd).size;
      if (size < BLOB_HEADER_SIZE) {
        throw new BlobFormatError(
          "header",
          filePath,
          0,
          `file has ${size} bytes, shorter than the 64-byte header`,
        );
      }
      const h = new Uint8Array(BLOB_HEADER_SIZE);
      readAll(fd, h, 0);
      const v = new DataView(h.buffer);
      const count = v.getUint32(0, true);
      const version = v.getUint32(4, true);
      if (version !== BLOB_STORAGE_VERSION) {
        throw new BlobFormatError(
          "header",
          filePath,
          0,
          `storage version ${version}, expected ${BLOB_STORAGE_VERSION}`,
        );
      }
      return new BlobReader(filePath, fd, size, count);
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  /** Decodes and checks the metadata record at `offset` (bounds, sentinel, dtype code, padding). */
  metadata(offset: number, label?: string): BlobMetadata {
    const fd = this.requireOpen();
    const file = this.filePath;
    const what = label ? `${label}: ` : "";
    if (
      !Number.isSafeInteger(offset) ||
      offset < BLOB_HEADER_SIZE ||
      offset + BLOB_METADATA_SIZE > this.fileSize
    ) {
      throw new BlobFormatError(
        "offset",
        file,
        offset,
        `${what}blob metadata offset ${offset} is outside the file's blob area [${BLOB_HEADER_SIZE}, ${this.fileSize - BLOB_METADATA_SIZE}]`,
      );
    }
    const md = new Uint8Array(BLOB_METADATA_SIZE);
    readAll(fd, md, offset);
    const v = new DataView(md.buffer);
    const sentinel = v.getUint32(0, true);
    if (sentinel !== BLOB_SENTINEL) {
      throw new BlobFormatError(
        "sentinel",
        file,
        offset,
        `${what}invalid sentinel 0x${sentinel.toString(16).padStart(8, "0")} in blob_metadata (expected 0xdeadbeef; ` +
          "is the offset that of the payload instead of the metadata?)",
      );
    }
    const dtypeCode = v.getUint32(4, true);
    const dtype = blobDTypeFromCode(dtypeCode);
    const sizeInBytes = u64(v, 8, file, offset, "sizeInBytes");
    const payloadOffset = u64(v, 16, file, offset, "payload offset");
    const paddingBits = u64(v, 24, file, offset, "padding_size_in_bits");
    if (paddingBits >= 8) {
      throw new BlobFormatError(
        "padding",
        file,
        offset,
        `${what}padding_size_in_bits is ${paddingBits}, must be < 8`,
      );
    }
    if (payloadOffset < offset + BLOB_METADATA_SIZE || payloadOffset + sizeInBytes > this.fileSize) {
      throw new BlobFormatError(
        "offset",
        file,
        offset,
        `${what}payload [${payloadOffset}, ${payloadOffset + sizeInBytes}) is outside the file (${this.fileSize} bytes) ` +
          `or overlaps its metadata`,
      );
    }
    return { offset, dtypeCode, dtype, sizeInBytes, payloadOffset, paddingBits };
  }

  /**
   * Checks that the blob at `offset` holds exactly a value of `type` (dtype code, size, padding)
   * and returns its metadata, without reading the payload.
   */
  check(offset: number, type: TensorType, label?: string): BlobMetadata {
    const md = this.metadata(offset, label);
    const file = this.filePath;
    const what = label ? `${label}: ` : "";
    const want = BLOB_DATA_TYPE[type.dtype];
    if (want === undefined) {
      throw new BlobFormatError(
        "dtype",
        file,
        offset,
        `${what}${type.dtype} values cannot live in a weight file`,
      );
    }
    if (md.dtypeCode !== want) {
      throw new BlobFormatError(
        "dtype",
        file,
        offset,
        `${what}blob dtype ${md.dtype ?? `code ${md.dtypeCode}`} does not match the requested ${type.dtype} (code ${want})`,
      );
    }
    const count = numel(type.shape);
    const bits = SUB_BYTE_BITS[type.dtype];
    if (bits === undefined) {
      if (md.paddingBits !== 0) {
        throw new BlobFormatError(
          "padding",
          file,
          offset,
          `${what}padding_size_in_bits ${md.paddingBits} on ${type.dtype}`,
        );
      }
      if (md.sizeInBytes !== byteSizeOf(type.dtype, count)) {
        throw new BlobFormatError(
          "size",
          file,
          offset,
          `${what}blob holds ${md.sizeInBytes} bytes, tensor<${type.dtype}, [${type.shape.join(", ")}]> needs ${byteSizeOf(type.dtype, count)}`,
        );
      }
    } else {
      const storedBits = md.sizeInBytes * 8 - md.paddingBits;
      if (storedBits % bits !== 0 || storedBits / bits !== count) {
        throw new BlobFormatError(
          "size",
          file,
          offset,
          `${what}blob holds ${md.sizeInBytes} bytes with ${md.paddingBits} padding bits ` +
            `(${storedBits / bits} ${type.dtype} elements), tensor<${type.dtype}, [${type.shape.join(", ")}]> has ${count}`,
        );
      }
    }
    return md;
  }

  /** Reads the value of `type` stored at metadata offset `offset`. */
  read(offset: number, type: TensorType, label?: string): MilData {
    const md = this.check(offset, type, label);
    const payload = new Uint8Array(md.sizeInBytes);
    const got = readAll(this.requireOpen(), payload, md.payloadOffset);
    if (got !== md.sizeInBytes) {
      throw new BlobFormatError(
        "io",
        this.filePath,
        offset,
        `short read: ${got} of ${md.sizeInBytes} payload bytes`,
      );
    }
    return elementsFromBytes(type.dtype, payload, numel(type.shape));
  }

  /**
   * Reads payload bytes [byteOffset, byteOffset + into.length) of the value of `type` at
   * metadata offset `offset` into `into` (sub-byte types as stored: packed).
   */
  readBytes(offset: number, type: TensorType, into: Uint8Array, byteOffset: number, label?: string): void {
    const md = this.check(offset, type, label);
    if (!Number.isSafeInteger(byteOffset) || byteOffset < 0 || byteOffset + into.length > md.sizeInBytes) {
      throw new BlobFormatError(
        "offset",
        this.filePath,
        offset,
        `${label ? `${label}: ` : ""}bytes [${byteOffset}, ${byteOffset + into.length}) are outside the ${md.sizeInBytes}-byte payload`,
      );
    }
    const got = readAll(this.requireOpen(), into, md.payloadOffset + byteOffset);
    if (got !== into.length) {
      throw new BlobFormatError(
        "io",
        this.filePath,
        offset,
        `short read: ${got} of ${into.length} payload bytes`,
      );
    }
  }

  /** Metadata offsets of all blobs, walking the file the way the writer lays it out. */
  offsets(): number[] {
    const out: number[] = [];
    let at = BLOB_HEADER_SIZE;
    for (let i = 0; i < this.count; i++) {
      const md = this.metadata(at, `blob ${i}`);
      out.push(at);
      at = Math.ceil((md.payloadOffset + md.sizeInBytes) / BLOB_ALIGNMENT) * BLOB_ALIGNMENT;
    }
    return out;
  }

  close(): void {
    if (this.fd !== undefined) {
      closeSync(this.fd);
      this.fd = undefined;
    }
  }

  private requireOpen(): number {
    if (this.fd === undefined)
      throw new BlobFormatError("io", this.filePath, 0, "weight file reader is closed");
    return this.fd;
  }
}

/** Opens `filePath`, reads a slice of one value's payload bytes into `into`, closes the file. */
export function readBlobBytes(
  filePath: string,
  offset: number,
  type: TensorType,
  into: Uint8Array,
  byteOffset: number,
  label?: string,
): void {
  const r = BlobReader.open(filePath);
  try {
    r.readBytes(offset, type, into, byteOffset, label);
  } finally {
    r.close();
  }
}

/** Opens `filePath`, reads one value, closes the file. */
export function readBlob(filePath: string, offset: number, type: TensorType, label?: string): MilData {
  const r = BlobReader.open(filePath);
  try {
    return r.read(offset, type, label);
  } finally {
    r.close();
  }
}

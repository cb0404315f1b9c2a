import { readFileSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { f32ToF16Bits } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { BlobReader, BlobWriter, DEFAULT_BLOB_FILE_NAME, readBlob } from "../../src/mil/format/blob.js";
import { BLOB_DATA_TYPE } from "../../src/mil/format/dtypes.js";
import { allocData } from "../../src/mil/format/elements.js";
import { BlobFormatError } from "../../src/mil/format/errors.js";
import { type MilData, type MilDType, type TensorType, tensorType } from "../../src/mil/program.js";
import { scratchDir } from "../testkit.js";
import { rng } from "./programs.js";

const dir = scratchDir("anemll-blob-");
let counter = 0;
const tmp = () => join(dir, `w${counter++}.bin`);

function u32(b: Uint8Array, at: number): number {
  return new DataView(b.buffer, b.byteOffset).getUint32(at, true);
}
function u64(b: Uint8Array, at: number): number {
  return Number(new DataView(b.buffer, b.byteOffset).getBigUint64(at, true));
}

/** Random data valid for `dtype`. */
function randomData(dtype: MilDType, n: number, seed: number): MilData {
  const r = rng(seed);
  const data = allocData(dtype, n) as unknown as { [i: number]: number };
  const ranges: Partial<Record<MilDType, [number, number]>> = {
    uint1: [0, 1],
    uint2: [0, 3],
    uint3: [0, 7],
    uint4: [0, 15],
    uint6: [0, 63],
    int4: [-8, 7],
    int8: [-128, 127],
    uint8: [0, 255],
    int16: [-32768, 32767],
    uint16: [0, 65535],
    fp16: [0, 65535],
    bf16: [0, 65535],
    int32: [-(2 ** 31), 2 ** 31 - 1],
    uint32: [0, 2 ** 32 - 1],
  };
  for (let i = 0; i < n; i++) {
    if (dtype === "fp32") data[i] = (r() - 0.5) * 1e3;
    else {
      const [lo, hi] = ranges[dtype]!;
      data[i] = lo + Math.floor(r() * (hi - lo + 1));
    }
  }
  return data as unknown as MilData;
}

describe("BlobWriter layout (byte-exact)", () => {
  it("places 5-byte uint8 blobs at metadata offsets 64, 192, 320, 448, 576, 704 (coremltools test)", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    const offsets = [];
    for (let i = 0; i < 6; i++) {
      offsets.push(w.write(tensorType("uint8", [5]), Uint8Array.of(i, i + 1, i + 2, i + 3, i + 4)).offset);
    }
    w.finish();
    expect(offsets).toEqual([64, 192, 320, 448, 576, 704]);
    const bytes = readFileSync(file);
    expect(bytes.length).toBe(704 + 64 + 5); // no padding after the last payload
    expect(u32(bytes, 0)).toBe(6); // count
    expect(u32(bytes, 4)).toBe(2); // version
    expect(bytes.subarray(8, 64).every((b) => b === 0)).toBe(true);
    for (const [i, off] of offsets.entries()) {
      expect(u32(bytes, off)).toBe(0xdeadbeef);
      expect(u32(bytes, off + 4)).toBe(3); // BlobDataType UInt8
      expect(u64(bytes, off + 8)).toBe(5);
      expect(u64(bytes, off + 16)).toBe(off + 64);
      expect(u64(bytes, off + 24)).toBe(0);
      expect(bytes.subarray(off + 32, off + 64).every((b) => b === 0)).toBe(true);
      expect([...bytes.subarray(off + 64, off + 69)]).toEqual([i, i + 1, i + 2, i + 3, i + 4]);
      if (i > 0) expect(bytes.subarray(offsets[i - 1] + 69, off).every((b) => b === 0)).toBe(true); // zero gap
    }
  });

  it("writes a uint4 blob packed, with blob dtype 11 and padding bits", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    const ref = w.write(tensorType("uint4", [5]), Uint8Array.of(5, 3, 6, 4, 15));
    w.finish();
    expect(ref).toEqual({ fileName: DEFAULT_BLOB_FILE_NAME, offset: 64 });
    const bytes = readFileSync(file);
    expect(u32(bytes, 68)).toBe(11); // UInt4 (MIL.proto would say 35)
    expect(u64(bytes, 72)).toBe(3);
    expect(u64(bytes, 88)).toBe(4); // 5×4 = 20 bits -> 4 padding bits
    expect([...bytes.subarray(128, 131)]).toEqual([0x35, 0x46, 0x0f]);
  });

  it("writes the 2-bit docstring example as 2 payload bytes with 6 padding bits", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    w.write(tensorType("uint2", [5]), Uint8Array.of(0, 3, 2, 1, 3));
    w.finish();
    const bytes = readFileSync(file);
    expect(u32(bytes, 68)).toBe(10); // UInt2
    expect(u64(bytes, 72)).toBe(2);
    expect(u64(bytes, 88)).toBe(6);
    expect([...bytes.subarray(128)]).toEqual([0b01101100, 0b00000011]);
    expect([...readBlob(file, 64, tensorType("uint2", [5]))]).toEqual([0, 3, 2, 1, 3]);
  });

  it("uses the blob dtype codes, not the MIL.proto codes", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    const dtypes = Object.keys(BLOB_DATA_TYPE) as MilDType[];
    const refs = dtypes.map((d) => w.write(tensorType(d, [3]), randomData(d, 3, 1)));
    w.finish();
    const bytes = readFileSync(file);
    dtypes.forEach((d, i) => {
      expect(u32(bytes, refs[i].offset + 4)).toBe(BLOB_DATA_TYPE[d]);
    });
    expect(BLOB_DATA_TYPE.fp16).toBe(1);
    expect(BLOB_DATA_TYPE.int32).toBe(14);
  });

  it("streams payloads to disk before finish (only the header count is patched at the end)", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    w.write(tensorType("fp16", [1000]), new Uint16Array(1000).fill(f32ToF16Bits(1)));
    expect(statSync(file).size).toBe(64 + 64 + 2000);
    expect(u32(readFileSync(file), 0)).toBe(0);
    w.write(tensorType("fp16", [10]), new Uint16Array(10));
    expect(statSync(file).size).toBe(w.size);
    w.finish();
    expect(u32(readFileSync(file), 0)).toBe(2);
    expect(() => w.write(tensorType("fp16", [1]), new Uint16Array(1))).toThrow(BlobFormatError);
  });

  it("refuses dtypes without a blob code and data of the wrong class", () => {
    const w = BlobWriter.create(tmp());
    expect(() => w.write(tensorType("bool", [2]), Uint8Array.of(0, 1))).toThrow(/bool cannot be stored/);
    expect(() => w.write(tensorType("fp16", [2]), Float32Array.of(0, 1))).toThrow(/Uint16Array/);
    w.abort();
  });
});

describe("BlobWriter writing behind", () => {
  const blobs: [TensorType, MilData][] = [
    [tensorType("uint4", [999]), randomData("uint4", 999, 1)],
    [tensorType("fp16", [3, 70]), randomData("fp16", 210, 2)],
    [tensorType("uint6", [129]), randomData("uint6", 129, 3)],
    [tensorType("fp32", [5000]), randomData("fp32", 5000, 4)],
    [tensorType("uint8", [7]), randomData("uint8", 7, 5)],
    [tensorType("int8", [4096]), randomData("int8", 4096, 6)],
  ];
  const writeAll = async (writeBehindBytes: number) => {
    const file = tmp();
    const w = BlobWriter.create(file, DEFAULT_BLOB_FILE_NAME, { writeBehindBytes });
    const offsets = blobs.map(([t, d]) => w.write(t, d).offset);
    await w.flush();
    w.finish({ sync: true });
    return { bytes: readFileSync(file), offsets };
  };

  it("writes the same file as writing each blob at once, queued or past the queue limit", async () => {
    const sync = await writeAll(0);
    for (const limit of [1 << 30, 3000]) {
      const behind = await writeAll(limit);
      expect(behind.offsets).toEqual(sync.offsets);
      expect(Buffer.compare(behind.bytes, sync.bytes)).toBe(0);
    }
  });

  it("refuses to finish before flush, and aborts safely with writes in flight", async () => {
    const w = BlobWriter.create(tmp(), DEFAULT_BLOB_FILE_NAME, { writeBehindBytes: 1 << 30 });
    w.write(tensorType("fp32", [1 << 16]), randomData("fp32", 1 << 16, 7));
    expect(() => w.finish()).toThrow(/await flush\(\) first/);
    await w.flush();
    w.finish();
    const a = BlobWriter.create(tmp(), DEFAULT_BLOB_FILE_NAME, { writeBehindBytes: 1 << 30 });
    a.write(tensorType("fp32", [1 << 16]), randomData("fp32", 1 << 16, 8));
    a.abort();
    await a.flush();
    expect(a.closed).toBe(true);
  });
});

describe("BlobReader", () => {
  it("round-trips every blob dtype, including empty and odd-length tensors", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    const items: { type: TensorType; data: MilData; offset: number }[] = [];
    let seed = 10;
    for (const dtype of Object.keys(BLOB_DATA_TYPE) as MilDType[]) {
      for (const shape of [[0], [1], [3, 7], [64, 33]]) {
        const type = tensorType(dtype, shape);
        const n = shape.reduce((a, b) => a * b, 1);
        const data = randomData(dtype, n, seed++);
        items.push({ type, data, offset: w.write(type, data).offset });
      }
    }
    w.finish();
    const r = BlobReader.open(file);
    try {
      expect(r.count).toBe(items.length);
      expect(r.offsets()).toEqual(items.map((i) => i.offset));
      for (const { type, data, offset } of items) {
        const back = r.read(offset, type);
        expect(back.constructor).toBe(data.constructor);
        expect([...(back as Uint8Array)]).toEqual([...(data as Uint8Array)]);
      }
    } finally {
      r.close();
    }
  });

  function oneBlob(type: TensorType, data: MilData): { file: string; offset: number } {
    const file = tmp();
    const w = BlobWriter.create(file);
    const { offset } = w.write(type, data);
    w.finish();
    return { file, offset };
  }

  function expectBlobError(
    fn: () => unknown,
    reason: string,
    file: string,
    offset: number,
    message?: RegExp,
  ): void {
    let err: unknown;
    try {
      fn();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BlobFormatError);
    const e = err as BlobFormatError;
    expect(e.reason).toBe(reason);
    expect(e.file).toBe(file);
    expect(e.offset).toBe(offset);
    expect(e.message).toContain(file);
    if (message) expect(e.message).toMatch(message);
  }

  /** Reading `blob` as `type` fails for `reason`, naming its file and offset. */
  function expectReadError(
    blob: { file: string; offset: number },
    type: TensorType,
    reason: string,
    message?: RegExp,
  ): void {
    expectBlobError(() => readBlob(blob.file, blob.offset, type), reason, blob.file, blob.offset, message);
  }

  const w16 = tensorType("fp16", [4, 4]);
  const d16 = new Uint16Array(16).fill(0x3c00);

  it("rejects a wrong storage version and a truncated header", () => {
    const { file } = oneBlob(w16, d16);
    const bytes = readFileSync(file);
    bytes.writeUInt32LE(3, 4);
    writeFileSync(file, bytes);
    expectBlobError(() => BlobReader.open(file), "header", file, 0, /version 3, expected 2/);
    const short = tmp();
    writeFileSync(short, new Uint8Array(10));
    expectBlobError(() => BlobReader.open(short), "header", short, 0, /shorter than the 64-byte header/);
  });

  it("rejects metadata offsets outside the file or inside the header", () => {
    const { file } = oneBlob(w16, d16);
    expectBlobError(() => readBlob(file, 4096, w16), "offset", file, 4096, /outside the file/);
    expectBlobError(() => readBlob(file, 0, w16), "offset", file, 0);
    expectBlobError(() => readBlob(file, 100, w16, "const w"), "offset", file, 100, /const w/);
  });

  it("rejects an offset that points at the payload (bad sentinel)", () => {
    const file = tmp();
    const w = BlobWriter.create(file);
    const { offset } = w.write(tensorType("fp16", [64]), new Uint16Array(64));
    w.finish();
    expectBlobError(
      () => readBlob(file, offset + 64, tensorType("fp16", [64])),
      "sentinel",
      file,
      offset + 64,
      /sentinel/,
    );
  });

  it("rejects a blob whose dtype differs from the requested type", () => {
    const blob = oneBlob(w16, d16);
    expectReadError(blob, tensorType("fp32", [4, 2]), "dtype", /fp16 does not match the requested fp32/);
    expectReadError(blob, tensorType("bool", [32]), "dtype");
  });

  it("rejects padding_size_in_bits >= 8 and padding on whole-byte types", () => {
    const a = oneBlob(tensorType("uint4", [3]), Uint8Array.of(1, 2, 3));
    const bytes = readFileSync(a.file);
    bytes.writeBigUInt64LE(8n, a.offset + 24);
    writeFileSync(a.file, bytes);
    expectReadError(a, tensorType("uint4", [3]), "padding", /must be < 8/);
    const b = oneBlob(w16, d16);
    const bytes2 = readFileSync(b.file);
    bytes2.writeBigUInt64LE(3n, b.offset + 24);
    writeFileSync(b.file, bytes2);
    expectReadError(b, w16, "padding");
  });

  it("rejects a size inconsistent with the element count", () => {
    expectReadError(oneBlob(w16, d16), tensorType("fp16", [4, 5]), "size", /needs 40/);
    const s = oneBlob(tensorType("uint4", [5]), Uint8Array.of(1, 2, 3, 4, 5));
    // 3 bytes with 4 padding bits hold exactly 5 elements; asking for 6 must fail
    expectReadError(s, tensorType("uint4", [6]), "size");
    expect([...readBlob(s.file, s.offset, tensorType("uint4", [5]))]).toEqual([1, 2, 3, 4, 5]);
  });

  it("rejects a payload that runs past the end of the file (truncated file)", () => {
    const blob = oneBlob(w16, d16);
    truncateSync(blob.file, statSync(blob.file).size - 1);
    expectReadError(blob, w16, "offset", /payload/);
  });

  it("names a missing file as an io error", () => {
    const missing = join(dir, "nope.bin");
    expectBlobError(() => BlobReader.open(missing), "io", missing, 0);
  });
});

describe("BlobWriter: content-addressed", () => {
  it("stores a constant written twice (same dtype, count and bytes) once and returns the same ref", () => {
    const w = BlobWriter.create(tmp());
    const data = new Uint16Array(64).map((_, i) => f32ToF16Bits(i / 7));
    const a = w.write(tensorType("fp16", [64]), data);
    const size = w.size;
    const b = w.write(tensorType("fp16", [8, 8]), Uint16Array.from(data)); // another array, same bytes
    expect(b).toEqual(a);
    expect(w.size).toBe(size);
    const other = w.write(tensorType("uint16", [64]), data); // same bytes, another dtype: a blob of its own
    expect(other.offset).not.toBe(a.offset);
    expect(w.count).toBe(2);
    w.finish();
  });
});

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { open, readFile, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { bf16BitsToF32, f32ToBf16Bits, f32ToF16Bits, type Tensor, tensor } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import {
  SafetensorsError,
  SafetensorsFile,
  SafetensorsWriter,
  writeSafetensors,
} from "../../src/checkpoint/index.js";
import { encodeSafetensorsHeader } from "../../src/checkpoint/safetensors-writer.js";
import { listDir, tempDir, vals } from "./helpers.js";

const PYTHON = fileURLToPath(new URL("../../../../.venv/bin/python", import.meta.url));

/** One tensor of every dtype with distinct, recognisable values. */
function allDtypes(): { name: string; tensor: Tensor }[] {
  return [
    { name: "f32", tensor: tensor("f32", [2, 3], Float32Array.from([1.5, -2, 3.25, 0, 1e-30, -7])) },
    { name: "f16", tensor: tensor("f16", [3], Uint16Array.from([0.5, -65504, 3.140625].map(f32ToF16Bits))) },
    { name: "bf16", tensor: tensor("bf16", [1, 3], Uint16Array.from([1, -3.5, 1e20].map(f32ToBf16Bits))) },
    { name: "i8", tensor: tensor("i8", [4], Int8Array.from([-128, -1, 0, 127])) },
    { name: "u8", tensor: tensor("u8", [3], Uint8Array.from([0, 200, 255])) },
    { name: "i16", tensor: tensor("i16", [2], Int16Array.from([-32768, 12345])) },
    { name: "i32", tensor: tensor("i32", [2], Int32Array.from([-2147483648, 7])) },
    { name: "i64", tensor: tensor("i64", [2], BigInt64Array.from([-(2n ** 62n), 9007199254740993n])) },
    { name: "bool", tensor: tensor("bool", [3], Uint8Array.from([1, 0, 1])) },
    { name: "empty", tensor: tensor("f32", [0, 4]) },
    { name: "scalar", tensor: tensor("f32", [], Float32Array.from([42])) },
  ];
}

/** Builds a raw safetensors file from header text (or object) and data bytes. */
async function rawFile(
  path: string,
  header: string | object,
  data: Uint8Array,
  declaredLength?: bigint,
): Promise<string> {
  const json = new TextEncoder().encode(typeof header === "string" ? header : JSON.stringify(header));
  const out = new Uint8Array(8 + json.byteLength + data.byteLength);
  new DataView(out.buffer).setBigUint64(0, declaredLength ?? BigInt(json.byteLength), true);
  out.set(json, 8);
  out.set(data, 8 + json.byteLength);
  await writeFile(path, out);
  return path;
}

async function expectSafetensorsError(
  p: Promise<unknown>,
  file: string,
  tensorName: string | undefined,
  pattern: RegExp,
) {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SafetensorsError);
  const e = err as SafetensorsError;
  expect(e.code).toBe("E_SAFETENSORS");
  expect(e.file).toBe(file);
  expect(e.tensor).toBe(tensorName);
  expect(e.message).toMatch(pattern);
  expect(e.message).toContain(file);
  return e;
}

/** Opening `file` is refused with a SafetensorsError naming it (and `tensorName`). */
const expectOpenError = (file: string, tensorName: string | undefined, pattern: RegExp) =>
  expectSafetensorsError(SafetensorsFile.open(file), file, tensorName, pattern);

describe("safetensors round trip", () => {
  it("writes and lazily reads every dtype, with metadata", async () => {
    const dir = await tempDir();
    const path = join(dir, "all.safetensors");
    const tensors = allDtypes();
    await writeSafetensors(path, tensors, { metadata: { format: "pt", note: "x" } });
    await using f = await SafetensorsFile.open(path);
    expect(f.metadata).toEqual({ format: "pt", note: "x" });
    expect(f.names().sort()).toEqual(tensors.map((t) => t.name).sort());
    for (const { name, tensor: t } of tensors) {
      const info = f.info(name);
      expect(info.dtype).toBe(t.dtype);
      expect(info.shape).toEqual(t.shape);
      const back = await f.read(name);
      expect(back.dtype).toBe(t.dtype);
      expect(back.shape).toEqual(t.shape);
      expect(Array.from(back.data as ArrayLike<unknown>)).toEqual(Array.from(t.data as ArrayLike<unknown>));
      expect(await f.readBytes(name)).toEqual(
        new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength),
      );
    }
    const bf = await f.readFloat32("bf16");
    expect(Array.from(bf.data)).toEqual([1, -3.5, bf16BitsToF32(f32ToBf16Bits(1e20))]);
    await expect(f.read("nope")).rejects.toThrow(SafetensorsError);
  });

  it("pads the header with spaces to a multiple of 8 and tiles the data region", async () => {
    const dir = await tempDir();
    const path = join(dir, "a.safetensors");
    await writeSafetensors(path, [{ name: "x", tensor: tensor("u8", [3], Uint8Array.from([1, 2, 3])) }]);
    const bytes = await readFile(path);
    const n = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
    expect(n % 8).toBe(0);
    const header = bytes.subarray(8, 8 + n).toString("utf8");
    expect(header.startsWith("{")).toBe(true);
    expect(header.trimEnd().endsWith("}")).toBe(true);
    expect(/^ *$/.test(header.slice(header.trimEnd().length))).toBe(true);
    expect(bytes.byteLength).toBe(8 + n + 3);
    expect(Array.from(bytes.subarray(8 + n))).toEqual([1, 2, 3]);
  });

  it("is deterministic: 'name' order ignores declaration order; 'given' and 'aligned' as documented", async () => {
    const dir = await tempDir();
    const a = tensor("bf16", [3], Uint16Array.from([1, 2, 3]));
    const b = tensor("f32", [1], Float32Array.from([4]));
    const c = tensor("u8", [1], Uint8Array.from([5]));
    const tensors = { a, b, c };
    /** Writes file `name` in `dir`, declaring the tensors in the order of the letters in `names`. */
    const write = (name: string, names: string, options?: Parameters<typeof writeSafetensors>[2]) =>
      writeSafetensors(
        join(dir, name),
        [...names].map((n) => ({ name: n, tensor: tensors[n as keyof typeof tensors] })),
        options,
      );
    await write("1", "cab");
    await write("2", "bca");
    expect(await readFile(join(dir, "1"))).toEqual(await readFile(join(dir, "2")));
    const orderIn = async (file: string) => {
      await using f = await SafetensorsFile.open(file);
      return f.names();
    };
    expect(await orderIn(join(dir, "1"))).toEqual(["a", "b", "c"]);
    await write("3", "cab", { order: "given" });
    expect(await orderIn(join(dir, "3"))).toEqual(["c", "a", "b"]);
    await write("4", "acb", { order: "aligned" });
    expect(await orderIn(join(dir, "4"))).toEqual(["b", "a", "c"]);
    await using f4 = await SafetensorsFile.open(join(dir, "4"));
    for (const name of ["a", "b", "c"]) {
      const info = f4.info(name);
      const size = info.dtype === "f32" ? 4 : info.dtype === "bf16" ? 2 : 1;
      expect(info.fileOffset % size).toBe(0);
    }
  });

  it("reads a tensor larger than the parallel-read chunk intact (40 MB)", async () => {
    const dir = await tempDir();
    const path = join(dir, "large.safetensors");
    const n = 10_000_003; // f32 elements, not a multiple of the chunk size
    const data = new Int32Array(n);
    for (let i = 0; i < n; i++) data[i] = Math.imul(i, 2654435761);
    await writeSafetensors(path, [
      { name: "head", tensor: tensor("u8", [3], Uint8Array.from([9, 8, 7])) },
      { name: "large", tensor: tensor("i32", [n], data) },
    ]);
    await using f = await SafetensorsFile.open(path);
    const back = (await f.read("large")).data as Int32Array;
    expect(back.length).toBe(n);
    let mismatches = 0;
    for (let i = 0; i < n; i++) if (back[i] !== data[i]) mismatches++;
    expect(mismatches).toBe(0);
    // readInto: a reused caller buffer, filled and returned as a view of the right length
    const reused = new Uint8Array(n * 4 + 100).fill(0xee);
    const head = await f.readInto("head", reused);
    expect(Array.from(head)).toEqual([9, 8, 7]);
    expect(reused[3]).toBe(0xee);
    const view = await f.readInto("large", reused);
    expect(view.byteLength).toBe(n * 4);
    expect(new Int32Array(view.buffer, 0, n)[n - 1]).toBe(data[n - 1]);
    await expect(f.readInto("large", new Uint8Array(10))).rejects.toThrow(/target has 10 bytes/);
  });

  it("reads one tensor of a file whose other tensor is 4 GB without touching it (lazy, sparse file)", async () => {
    const dir = await tempDir();
    const path = join(dir, "big.safetensors");
    const big = 4 * 1024 ** 3;
    const header = encodeSafetensorsHeader(
      [
        { name: "small", dtype: "f32", shape: [2] },
        { name: "huge", dtype: "u8", shape: [big] },
      ],
      undefined,
    );
    await writeFile(path, header);
    const fh = await open(path, "r+");
    await fh.write(new Uint8Array(Float32Array.from([3, 4]).buffer), 0, 8, header.byteLength);
    await fh.close();
    await truncate(path, header.byteLength + 8 + big); // sparse: no 4 GB actually written
    const before = process.memoryUsage().rss;
    await using f = await SafetensorsFile.open(path);
    expect(f.info("huge").byteLength).toBe(big);
    expect(vals(await f.read("small"))).toEqual([3, 4]);
    expect(process.memoryUsage().rss - before).toBeLessThan(256 * 1024 ** 2);
    const slice = await f.readRange("huge", big - 16, 16);
    expect(Array.from(slice)).toEqual(new Array(16).fill(0));
  });
});

describe("streaming writer", () => {
  it("accepts chunks, interleaved across tensors, and renames into place only on close", async () => {
    const dir = await tempDir();
    const path = join(dir, "s.safetensors");
    const w = await SafetensorsWriter.create(path, [
      { name: "x", dtype: "u8", shape: [6] },
      { name: "y", dtype: "bf16", shape: [2] },
    ]);
    await w.writeBytes("x", Uint8Array.from([1, 2]));
    await w.write("y", tensor("bf16", [2], Uint16Array.from([7, 8])));
    expect(existsSync(path)).toBe(false);
    await w.writeBytes("x", Uint8Array.from([3, 4, 5, 6]));
    await w.close();
    expect(await listDir(dir)).toEqual(["s.safetensors"]);
    await using f = await SafetensorsFile.open(path);
    expect(Array.from(await f.readBytes("x"))).toEqual([1, 2, 3, 4, 5, 6]);
    expect(vals(await f.read("y"))).toEqual([7, 8]);
  });

  it("rejects undeclared tensors, wrong shapes and overflowing chunks", async () => {
    const dir = await tempDir();
    const path = join(dir, "s.safetensors");
    const w = await SafetensorsWriter.create(path, [{ name: "x", dtype: "f32", shape: [2] }]);
    await expect(w.write("z", tensor("f32", [2]))).rejects.toThrow(/not declared/);
    await expect(w.write("x", tensor("f32", [3]))).rejects.toThrow(/declared f32 \[2\] but got f32 \[3\]/);
    await expect(w.write("x", tensor("f16", [2]))).rejects.toThrow(/but got f16/);
    await expect(w.writeBytes("x", new Uint8Array(12))).rejects.toThrow(/12 bytes for a 8-byte tensor/);
    await w.abort();
    expect(await listDir(dir)).toEqual([]);
  });

  it("refuses to close with an incomplete tensor and leaves no file behind", async () => {
    const dir = await tempDir();
    const path = join(dir, "s.safetensors");
    const w = await SafetensorsWriter.create(path, [
      { name: "x", dtype: "f32", shape: [2] },
      { name: "y", dtype: "f32", shape: [1] },
    ]);
    await w.writeBytes("x", new Uint8Array(4));
    const e = await expectSafetensorsError(w.close(), path, "x", /incomplete: 4 of 8 bytes/);
    expect(e.tensor).toBe("x");
    expect(await listDir(dir)).toEqual([]);
  });

  it("await using without close() discards the temp file", async () => {
    const dir = await tempDir();
    {
      await using w = await SafetensorsWriter.create(join(dir, "s.safetensors"), [
        { name: "x", dtype: "u8", shape: [1] },
      ]);
      await w.writeBytes("x", Uint8Array.from([1]));
      expect((await listDir(dir)).length).toBe(1); // the hidden temp file
    }
    expect(await listDir(dir)).toEqual([]);
  });

  it("streams from an async iterable given the specs up front, and requires specs for non-arrays", async () => {
    const dir = await tempDir();
    const path = join(dir, "it.safetensors");
    async function* gen() {
      for (let i = 0; i < 3; i++)
        yield { name: `t${i}`, tensor: tensor("i32", [2], Int32Array.from([i, -i])) };
    }
    const specs = [0, 1, 2].map((i) => ({ name: `t${i}`, dtype: "i32" as const, shape: [2] }));
    await writeSafetensors(path, gen(), { specs });
    await using f = await SafetensorsFile.open(path);
    expect(vals(await f.read("t2"))).toEqual([2, -2]);
    await expect(writeSafetensors(join(dir, "no.safetensors"), gen())).rejects.toThrow(/need `specs`/);
  });
});

describe("safetensors validation", () => {
  const data4 = new Uint8Array(4);
  const entry = (dtype: string, shape: number[], offsets: number[]) => ({
    dtype,
    shape,
    data_offsets: offsets,
  });

  it("file shorter than 8 bytes", async () => {
    const dir = await tempDir();
    const path = join(dir, "short.safetensors");
    await writeFile(path, new Uint8Array(5));
    await expectOpenError(path, undefined, /5 bytes; .*8-byte header length/);
  });

  it("header length past the end of the file", async () => {
    const dir = await tempDir();
    const path = await rawFile(join(dir, "p.safetensors"), { a: entry("U8", [4], [0, 4]) }, data4, 5000n);
    await expectOpenError(path, undefined, /header length 5000 runs past the end/);
  });

  it("header length over 100 MB", async () => {
    const dir = await tempDir();
    const path = await rawFile(join(dir, "h.safetensors"), "{}", new Uint8Array(0), 100_000_001n);
    await expectOpenError(path, undefined, /100000001 exceeds the 100000000-byte limit/);
  });

  it("non-JSON header", async () => {
    const dir = await tempDir();
    const path = await rawFile(join(dir, "j.safetensors"), "{not json   ", new Uint8Array(0));
    await expectOpenError(path, undefined, /header is not JSON/);
    const path2 = await rawFile(join(dir, "arr.safetensors"), "[1, 2]  ", new Uint8Array(0));
    await expectOpenError(path2, undefined, /not an object/);
  });

  it("offsets out of range (truncated file)", async () => {
    const dir = await tempDir();
    const path = await rawFile(
      join(dir, "r.safetensors"),
      { a: entry("U8", [4], [0, 4]), b: entry("F32", [2], [4, 12]) },
      new Uint8Array(10),
    );
    await expectOpenError(path, "b", /\[4, 12\] are out of range: the data region has 10 bytes/);
  });

  it("overlapping offsets", async () => {
    const dir = await tempDir();
    const path = await rawFile(
      join(dir, "o.safetensors"),
      { a: entry("U8", [4], [0, 4]), b: entry("U8", [4], [2, 6]) },
      new Uint8Array(6),
    );
    await expectOpenError(path, "b", /overlap tensor "a"/);
  });

  it("offsets not covering the data region (hole, and trailing bytes)", async () => {
    const dir = await tempDir();
    const hole = await rawFile(
      join(dir, "hole.safetensors"),
      { a: entry("U8", [2], [0, 2]), b: entry("U8", [2], [4, 6]) },
      new Uint8Array(6),
    );
    await expectOpenError(hole, "b", /bytes \[2, 4\) before this tensor belong to no tensor/);
    const tail = await rawFile(
      join(dir, "tail.safetensors"),
      { a: entry("U8", [2], [0, 2]) },
      new Uint8Array(5),
    );
    await expectOpenError(tail, undefined, /3 trailing bytes belong to no tensor/);
  });

  it("byte size not matching dtype x shape", async () => {
    const dir = await tempDir();
    const path = await rawFile(join(dir, "s.safetensors"), { w: entry("BF16", [3], [0, 4]) }, data4);
    await expectOpenError(path, "w", /span 4 bytes but BF16 \[3\] needs 6/);
  });

  it("unknown and unsupported dtypes", async () => {
    const dir = await tempDir();
    const path = await rawFile(join(dir, "d.safetensors"), { w: entry("Q4_K", [4], [0, 4]) }, data4);
    await expectOpenError(path, "w", /unknown dtype "Q4_K"/);
    const path2 = await rawFile(
      join(dir, "d2.safetensors"),
      { w: entry("F64", [1], [0, 8]) },
      new Uint8Array(8),
    );
    await expectOpenError(path2, "w", /unsupported dtype "F64"/);
  });

  it("duplicate tensor names (JSON duplicate keys)", async () => {
    const dir = await tempDir();
    const header =
      '{"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}';
    const path = await rawFile(join(dir, "dup.safetensors"), header, data4);
    await expectOpenError(path, "w", /duplicate key "w"/);
  });

  it("bad shapes, offsets and metadata name the tensor", async () => {
    const dir = await tempDir();
    const p1 = await rawFile(join(dir, "1.safetensors"), { w: entry("U8", [-1], [0, 4]) }, data4);
    await expectOpenError(p1, "w", /shape must be an array of non-negative integers/);
    const p2 = await rawFile(join(dir, "2.safetensors"), { w: entry("U8", [4], [4, 0]) }, data4);
    await expectOpenError(p2, "w", /data_offsets must be \[begin, end\]/);
    const p3 = await rawFile(
      join(dir, "3.safetensors"),
      { __metadata__: { a: 1 }, w: entry("U8", [4], [0, 4]) },
      data4,
    );
    await expectOpenError(p3, undefined, /__metadata__\["a"\] must be a string/);
  });
});

describe.runIf(existsSync(PYTHON))("interop with Python safetensors (/work/main/.venv)", () => {
  it("Python reads our file byte-for-byte, and we read Python's", async () => {
    const dir = await tempDir();
    const ours = join(dir, "ours.safetensors");
    const tensors = allDtypes();
    await writeSafetensors(ours, tensors, { metadata: { format: "pt" } });
    const theirs = join(dir, "theirs.safetensors");
    const script = `
import json, sys, numpy as np, safetensors
from safetensors.numpy import save_file
out = {}
for name, t in safetensors.deserialize(open(sys.argv[1], "rb").read()):
    out[name] = {"dtype": t["dtype"], "shape": t["shape"], "hex": bytes(t["data"]).hex()}
save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3) / 4, "b": np.array([-5, 70000], dtype=np.int64),
           "c": np.array([1.5, -0.25], dtype=np.float16), "d": np.array([True, False])}, sys.argv[2], metadata={"k": "v"})
print(json.dumps(out))
`;
    const r = spawnSync(PYTHON, ["-c", script, ours, theirs], { encoding: "utf8" });
    expect(r.stderr).toBe("");
    const seen = JSON.parse(r.stdout) as Record<string, { dtype: string; shape: number[]; hex: string }>;
    for (const { name, tensor: t } of tensors) {
      expect(seen[name].shape).toEqual(t.shape);
      expect(seen[name].dtype).toBe(t.dtype.toUpperCase());
      expect(seen[name].hex).toBe(
        Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).toString("hex"),
      );
    }
    await using f = await SafetensorsFile.open(theirs);
    expect(f.metadata).toEqual({ k: "v" });
    expect(vals(await f.read("a"))).toEqual([0, 0.25, 0.5, 0.75, 1, 1.25]);
    expect((await f.read("a")).shape).toEqual([2, 3]);
    expect(Array.from((await f.read("b")).data as BigInt64Array)).toEqual([-5n, 70000n]);
    expect(vals(await f.readFloat32("c"))).toEqual([1.5, -0.25]);
    expect((await f.read("d")).dtype).toBe("bool");
  });
});

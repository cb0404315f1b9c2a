/**
 * coremltools as the independent judge: it must accept every hand-built package we write, reject
 * deliberately broken ones, agree with our schema's field numbers, and read/write blobs that our
 * reader/writer agree with bit for bit; and our reader must read a package coremltools wrote.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type protobuf from "protobufjs";
import { beforeAll, describe, expect, it } from "vitest";
import { BlobReader, BlobWriter } from "../../src/mil/format/blob.js";
import { BLOB_DATA_TYPE } from "../../src/mil/format/dtypes.js";
import { BlobFormatError } from "../../src/mil/format/errors.js";
import { readMlPackage, readMlPackageProto, writeMlPackage } from "../../src/mil/format/package.js";
import { coremlProtoRoot, encodeModelProto } from "../../src/mil/format/proto.js";
import type { MilData, MilDType, MlModel } from "../../src/mil/program.js";
import { tensorType } from "../../src/mil/program.js";
import { type CoremltoolsValidation, scratchDir, validateWithCoremltools } from "../testkit.js";
import { type Availability, type OracleAnswer, requireAvailable, runOracle } from "./oracle.js";
import {
  blockwiseModel,
  fp16Random,
  intRandom,
  linearModel,
  lutModel,
  multifunctionModel,
  statefulModel,
} from "./programs.js";

const dir = scratchDir("anemll-ct-");

const good: Record<string, MlModel> = {
  linear: linearModel(),
  stateful: statefulModel(),
  lut_uint4: lutModel(),
  blockwise_int8: blockwiseModel("int8"),
  blockwise_int4: blockwiseModel("int4"),
  multifunction: multifunctionModel(),
};
const pkg = (name: string) => join(dir, `${name}.mlpackage`);
const weightFile = (name: string) => join(pkg(name), "Data/com.apple.CoreML/weights/weight.bin");

/** Blob dtypes coremltools can read and write (bf16 has a blob code but no coremltools accessor). */
const CT_BLOB_DTYPES = (Object.keys(BLOB_DATA_TYPE) as MilDType[]).filter((d) => d !== "bf16");
const blobItems: { dtype: MilDType; data: MilData; offset: number }[] = [];
const ctValues: Record<MilDType, number[]> = {} as Record<MilDType, number[]>;

let validation: CoremltoolsValidation;
let oracle: Availability & OracleAnswer;

beforeAll(async () => {
  for (const [name, model] of Object.entries(good)) await writeMlPackage(pkg(name), model);

  // Broken 1: a declared op output type that coremltools' type inference disagrees with.
  await writeMlPackage(pkg("bad_output_shape"), linearModel({ outputShape: [1, 4, 31] }));
  // Broken 2: a blob offset pointing at the payload instead of the metadata.
  await writeMlPackage(pkg("bad_blob_offset"), linearModel());
  {
    const { layout, proto } = await readMlPackageProto(pkg("bad_blob_offset"));
    const w = proto.mlProgram!.functions!.main.block_specializations!.CoreML8.operations![0];
    const blob = w.attributes!.val.blobFileValue!;
    blob.offset = Number(blob.offset) + 64;
    writeFileSync(layout.modelFile, encodeModelProto(proto));
  }
  // Broken 3: the weight file says fp32 where the program says fp16.
  await writeMlPackage(pkg("bad_blob_dtype"), linearModel());
  {
    const bytes = readFileSync(weightFile("bad_blob_dtype"));
    bytes.writeUInt32LE(BLOB_DATA_TYPE.fp32!, 64 + 4);
    writeFileSync(weightFile("bad_blob_dtype"), bytes);
  }

  const paths = [...Object.keys(good), "bad_output_shape", "bad_blob_offset", "bad_blob_dtype"].map(pkg);
  validation = await validateWithCoremltools(paths);

  // Every blob dtype, written by us (read back by coremltools) and by coremltools (read by us).
  const ours = join(dir, "ours.bin");
  const w = BlobWriter.create(ours);
  let seed = 100;
  for (const dtype of CT_BLOB_DTYPES) {
    const n = 37; // odd: exercises sub-byte padding
    const data = randomFor(dtype, n, seed++);
    blobItems.push({ dtype, data, offset: w.write(tensorType(dtype, [n]), data).offset });
    ctValues[dtype] = Array.from(randomFor(dtype, n, seed++) as ArrayLike<number>);
  }
  w.finish();
  const result = await runOracle({
    schema: true,
    readBlobs: { file: ours, items: blobItems.map(({ dtype, offset }) => ({ dtype, offset })) },
    writeBlobs: {
      file: join(dir, "theirs.bin"),
      items: CT_BLOB_DTYPES.map((dtype) => ({ dtype, values: ctValues[dtype] })),
    },
    makePackage: pkg("made_by_coremltools"),
  });
  oracle = result as Availability & OracleAnswer;
});

function randomFor(dtype: MilDType, n: number, seed: number): MilData {
  switch (dtype) {
    case "fp16":
      return fp16Random(n, seed);
    case "fp32":
      return Float32Array.from(fp16Random(n, seed), (b, i) => b / 7 - i);
    case "int8":
      return intRandom(Int8Array, n, -128, 127, seed);
    case "int4":
      return intRandom(Int8Array, n, -8, 7, seed);
    case "uint8":
      return intRandom(Uint8Array, n, 0, 255, seed);
    case "int16":
      return Int16Array.from(fp16Random(n, seed), (b) => b - 32768);
    case "uint16":
      return Uint16Array.from(fp16Random(n, seed));
    case "int32":
      return Int32Array.from(fp16Random(n, seed), (b) => (b - 30000) * 65537);
    case "uint32":
      return Uint32Array.from(fp16Random(n, seed), (b) => b * 65537);
    default: {
      const bits = { uint1: 1, uint2: 2, uint3: 3, uint4: 4, uint6: 6 }[dtype as "uint1"];
      return intRandom(Uint8Array, n, 0, (1 << bits) - 1, seed);
    }
  }
}

function verdict(name: string) {
  if (!validation.available) throw new Error("unreachable");
  const v = validation.verdicts.find((x) => x.path === pkg(name));
  if (!v) throw new Error(`no verdict for ${name}`);
  return v;
}

describe("coremltools validator", () => {
  for (const name of Object.keys(good)) {
    it(`accepts the hand-built ${name} package`, (ctx) => {
      requireAvailable(ctx, validation);
      const v = verdict(name);
      expect(v.error).toBeNull();
      expect(v.ok).toBe(true);
    });
  }

  it("rejects a declared output shape that type inference disagrees with (our reader cannot tell)", async (ctx) => {
    requireAvailable(ctx, validation);
    const v = verdict("bad_output_shape");
    expect(v.ok).toBe(false);
    expect(v.error).toMatch(/Mismatch between var types/);
    // The description is consistent with the (wrong) program, so only a type checker catches it.
    await expect(readMlPackage(pkg("bad_output_shape"))).resolves.toBeDefined();
  });

  it("rejects a blob offset that points at the payload, as our reader does", async (ctx) => {
    requireAvailable(ctx, validation);
    const v = verdict("bad_blob_offset");
    expect(v.ok).toBe(false);
    expect(v.error).toMatch(/sentinel/i);
    await expect(readMlPackage(pkg("bad_blob_offset"))).rejects.toMatchObject({
      reason: "sentinel",
      offset: 128,
    });
  });

  it("rejects a blob whose dtype disagrees with the program, as our reader does", async (ctx) => {
    requireAvailable(ctx, validation);
    const v = verdict("bad_blob_dtype");
    expect(v.ok).toBe(false);
    expect(v.error).toMatch(/data type does not match/i);
    await expect(readMlPackage(pkg("bad_blob_dtype"))).rejects.toBeInstanceOf(BlobFormatError);
  });

  it("reports the coremltools version it used", (ctx) => {
    requireAvailable(ctx, validation);
    if (!validation.available) return;
    expect(validation.coremltools).toMatch(/^\d+\.\d+/);
  });

  it("reports 'unavailable' with a reason when Python cannot be run", async () => {
    const r = await validateWithCoremltools([pkg("linear")], { python: join(dir, "no-such-python") });
    expect(r.available).toBe(false);
    if (!r.available) expect(r.reason).toMatch(/no-such-python/);
  });
});

describe("schema agrees with coremltools' compiled protos", () => {
  it("has Apple's field numbers for every field we declare", (ctx) => {
    requireAvailable(ctx, oracle);
    const theirs = oracle.schema!.messages;
    let checked = 0;
    const walk = (ns: protobuf.NamespaceBase) => {
      for (const obj of ns.nestedArray) {
        if ("fieldsArray" in obj) {
          const type = obj as protobuf.Type;
          const name = type.fullName.slice(1);
          expect(theirs[name], `message ${name} exists in coremltools`).toBeDefined();
          for (const f of type.fieldsArray) {
            expect(theirs[name][f.name], `${name}.${f.name}`).toBe(f.id);
            checked++;
          }
        }
        if ("nestedArray" in obj) walk(obj as protobuf.NamespaceBase);
      }
    };
    walk(coremlProtoRoot);
    expect(checked).toBeGreaterThan(100);
  });

  it("has Apple's enum values", (ctx) => {
    requireAvailable(ctx, oracle);
    const theirs = oracle.schema!.enums;
    for (const name of [
      "CoreML.Specification.MILSpec.DataType",
      "CoreML.Specification.ArrayFeatureType.ArrayDataType",
    ]) {
      expect(coremlProtoRoot.lookupEnum(name).values).toEqual(theirs[name]);
    }
  });
});

describe("blob storage agrees with coremltools bit for bit", () => {
  it("coremltools reads every blob dtype we write", (ctx) => {
    requireAvailable(ctx, oracle);
    blobItems.forEach(({ dtype, data }, i) => {
      expect(oracle.readBlobs![i], dtype).toEqual(Array.from(data as ArrayLike<number>));
    });
  });

  it("we read every blob dtype coremltools writes, at the offsets it reports", (ctx) => {
    requireAvailable(ctx, oracle);
    const r = BlobReader.open(join(dir, "theirs.bin"));
    try {
      expect(r.offsets()).toEqual(oracle.writeBlobs);
      CT_BLOB_DTYPES.forEach((dtype, i) => {
        const got = r.read(oracle.writeBlobs![i], tensorType(dtype, [ctValues[dtype].length]));
        expect(Array.from(got as ArrayLike<number>), dtype).toEqual(ctValues[dtype]);
      });
    } finally {
      r.close();
    }
  });

  it("writes the same weight file bytes as coremltools for the same blobs", (ctx) => {
    requireAvailable(ctx, oracle);
    const mine = join(dir, "mine-same.bin");
    const w = BlobWriter.create(mine);
    for (const dtype of CT_BLOB_DTYPES) {
      const values = ctValues[dtype];
      const C = randomFor(dtype, 0, 0).constructor as new (v: number[]) => MilData;
      w.write(tensorType(dtype, [values.length]), new C(values));
    }
    w.finish();
    expect(Buffer.compare(readFileSync(mine), readFileSync(join(dir, "theirs.bin")))).toBe(0);
  });
});

describe("a package made by coremltools", () => {
  it("reads, passes the description check and loads the constants coremltools wrote", async (ctx) => {
    requireAvailable(ctx, oracle);
    const made = oracle.makePackage!;
    const model = await readMlPackage(pkg("made_by_coremltools"));
    const fn = model.program.functions.main;
    expect(fn.opset).toBe("CoreML8");
    expect(fn.inputs.map((i) => i.type.kind)).toEqual(["tensor", "state"]);
    const weight = fn.block.operations.find((o) => o.type === "const" && o.name === "y_weight_0");
    expect(weight?.value && "load" in weight.value).toBe(true);
    if (weight?.value && "load" in weight.value)
      expect(Array.from(weight.value.load!() as Uint16Array)).toEqual(made.w);
    const lut = fn.block.operations.find((o) => o.type === "constexpr_lut_to_dense")!;
    const load = (param: string) => {
      const b = lut.inputs[param][0];
      if (b.kind !== "value") throw new Error(`${param} is not inline`);
      return "data" in b.value ? b.value.data : b.value.load!();
    };
    expect(Array.from(load("indices") as Uint8Array)).toEqual(made.indices);
    expect(Array.from(load("lut") as Uint16Array)).toEqual(made.lut);
    expect(fn.block.operations.some((o) => o.type === "write_state" && o.outputs.length === 0)).toBe(true);
  });

  it("re-encodes its model.mlmodel byte-identically", async (ctx) => {
    requireAvailable(ctx, oracle);
    const { layout, proto } = await readMlPackageProto(pkg("made_by_coremltools"));
    expect(Buffer.compare(Buffer.from(encodeModelProto(proto)), readFileSync(layout.modelFile))).toBe(0);
  });
});

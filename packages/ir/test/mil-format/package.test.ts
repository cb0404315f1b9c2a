import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULT_BLOB_FILE_NAME } from "../../src/mil/format/blob.js";
import { IoTypeError } from "../../src/mil/format/description.js";
import { BlobFormatError, DescriptionMismatchError, MlPackageError } from "../../src/mil/format/errors.js";
import { findWeightsItem, parseManifest } from "../../src/mil/format/manifest.js";
import {
  digestMlPackage,
  MlPackageWriter,
  readMlPackage,
  readMlPackageProto,
  writeMlPackage,
} from "../../src/mil/format/package.js";
import { decodeModelProto, encodeModelProto, type ModelProto } from "../../src/mil/format/proto.js";
import type { ConstValue, MlModel, Operation } from "../../src/mil/program.js";
import { tensorType } from "../../src/mil/program.js";
import { scratchDir } from "../testkit.js";
import {
  blockwiseModel,
  constValueOp,
  fp16Random,
  linearModel,
  lutModel,
  mainModel,
  materialise,
  multifunctionModel,
  op,
  out,
  singleFunctionModel,
  statefulModel,
  v,
} from "./programs.js";

const dir = scratchDir("anemll-pkg-");
let n = 0;
const fresh = (name = "m") => join(dir, `${name}${n++}.mlpackage`);
const modelFile = (p: string) => join(p, "Data/com.apple.CoreML/model.mlmodel");
const weightFile = (p: string) => join(p, "Data/com.apple.CoreML/weights/weight.bin");
/** A model with no inputs whose one output is the constant `c`. */
const constModel = (value: ConstValue) => mainModel([], ["c"], [constValueOp("c", value)]);

async function expectRejects(
  p: Promise<unknown>,
  cls: new (...a: never[]) => Error,
  fields: Record<string, unknown>,
  message?: RegExp,
): Promise<Error> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(cls);
  expect(err).toMatchObject(fields);
  if (message) expect((err as Error).message).toMatch(message);
  return err as Error;
}

/** Rewrites a package's model.mlmodel through a mutation of its Model message. */
async function patchModel(path: string, mutate: (m: ModelProto) => void): Promise<void> {
  const { proto } = await readMlPackageProto(path);
  mutate(proto);
  writeFileSync(modelFile(path), encodeModelProto(proto));
}

const models: Record<string, () => MlModel> = {
  linear: linearModel,
  stateful: statefulModel,
  lut: lutModel,
  blockwise_int4: () => blockwiseModel("int4"),
  multifunction: multifunctionModel,
};

describe("write -> read", () => {
  for (const [name, make] of Object.entries(models)) {
    it(`${name}: the package reads back as the same program with lazily loaded constants`, async () => {
      const model = make();
      const path = fresh(name);
      await writeMlPackage(path, model);
      const back = await readMlPackage(path);
      expect(back.specificationVersion).toBe(9);
      expect(back.metadata).toEqual(model.metadata);
      expect(back.defaultFunctionName).toEqual(model.defaultFunctionName);
      expect(materialise(back.program)).toEqual(materialise(model.program));
    });
  }

  it("lays the package out as coremltools does, with both manifest items", async () => {
    const path = fresh();
    await writeMlPackage(path, linearModel());
    expect(readdirSync(path).sort()).toEqual(["Data", "Manifest.json"]);
    expect(readdirSync(join(path, "Data/com.apple.CoreML")).sort()).toEqual(["model.mlmodel", "weights"]);
    expect(readdirSync(join(path, "Data/com.apple.CoreML/weights"))).toEqual(["weight.bin"]);
    const manifest = JSON.parse(readFileSync(join(path, "Manifest.json"), "utf8"));
    expect(manifest.fileFormatVersion).toBe("1.0.0");
    const items = Object.values(manifest.itemInfoEntries);
    expect(items).toContainEqual({
      author: "com.apple.CoreML",
      description: "CoreML Model Weights",
      name: "weights",
      path: "com.apple.CoreML/weights",
    });
    expect(manifest.itemInfoEntries[manifest.rootModelIdentifier]).toEqual({
      author: "com.apple.CoreML",
      description: "CoreML Model Specification",
      name: "model.mlmodel",
      path: "com.apple.CoreML/model.mlmodel",
    });
    expect(findWeightsItem(parseManifest(JSON.stringify(manifest), "m"))).toBeDefined();
    // "__proto__" is an id like any other (found by the reader fuzz test): no item, no prototype
    expect(() =>
      parseManifest(JSON.stringify({ ...manifest, rootModelIdentifier: "__proto__" }), "m"),
    ).toThrow(/rootModelIdentifier __proto__ names no item/);
    // the linear weight (512 fp16) and bias (32 fp16) live in weight.bin at 64 and 64+64+1024
    const { proto } = await readMlPackageProto(path);
    const ops = proto.mlProgram!.functions!.main.block_specializations!.CoreML8.operations!;
    expect(ops[0].attributes!.val.blobFileValue).toEqual({ fileName: DEFAULT_BLOB_FILE_NAME, offset: "64" });
    expect(ops[1].attributes!.val.blobFileValue).toEqual({
      fileName: DEFAULT_BLOB_FILE_NAME,
      offset: "1152",
    });
  });

  it("decode -> encode of a written model.mlmodel is byte-identical, and decode -> encode -> decode is the identity", async () => {
    for (const make of Object.values(models)) {
      const path = fresh();
      await writeMlPackage(path, make());
      const bytes = readFileSync(modelFile(path));
      const decoded = decodeModelProto(bytes);
      const again = encodeModelProto(decoded);
      expect(Buffer.compare(Buffer.from(again), bytes)).toBe(0);
      expect(decodeModelProto(again)).toEqual(decoded);
    }
  });

  it("multifunction packages share one weight file and describe each function", async () => {
    const path = fresh();
    await writeMlPackage(path, multifunctionModel());
    const { proto } = await readMlPackageProto(path);
    expect(proto.description!.defaultFunctionName).toBe("decode");
    expect(proto.description!.functions!.map((f) => f.name)).toEqual(["prefill", "decode"]);
    expect(proto.description!.input).toBeUndefined();
    expect(Object.keys(proto.mlProgram!.functions!)).toEqual(["prefill", "decode"]);
  });
});

describe("writer with a BlobSink (stream constants while building)", () => {
  it("keeps refs issued by its own sink and writes no copy", async () => {
    const path = fresh();
    const w = await MlPackageWriter.create(path);
    const wt = tensorType("fp16", [32, 16]);
    const wRef = w.blobs.write(wt, fp16Random(512, 11));
    const bRef = w.blobs.write(tensorType("fp16", [32]), fp16Random(32, 12));
    expect(wRef.offset).toBe(64);
    expect(w.weightBytes).toBe(64 + 64 + 1024 + 64 + 64);
    const model = singleFunctionModel({
      inputs: [out("x", tensorType("fp16", [1, 4, 16]))],
      opset: "CoreML8",
      block: {
        inputs: [],
        outputs: ["y"],
        operations: [
          constValueOp("w", { type: wt, blob: wRef }),
          constValueOp("b", { type: tensorType("fp16", [32]), blob: bRef }),
          op("linear", "y", { x: v("x"), weight: v("w"), bias: v("b") }, [
            out("y", tensorType("fp16", [1, 4, 32])),
          ]),
        ],
      },
    });
    expect(existsSync(path)).toBe(false); // nothing at the destination until finish
    await w.finish(model);
    expect(readFileSync(weightFile(path)).length).toBe(64 + 64 + 1024 + 64 + 64);
    const back = await readMlPackage(path);
    const wBack = back.program.functions.main.block.operations[0].value as Extract<
      ConstValue,
      { blob: unknown }
    >;
    expect(wBack.blob.offset).toBe(64);
    expect(Array.from(wBack.load!() as Uint16Array)).toEqual(Array.from(fp16Random(512, 11)));
    // a slice of the payload's bytes, bounds-checked against the blob
    const slice = new Uint8Array(6);
    wBack.readBytes!(slice, 100);
    expect(Array.from(new Uint16Array(slice.buffer))).toEqual(
      Array.from(fp16Random(512, 11).subarray(50, 53)),
    );
    expect(() => wBack.readBytes!(new Uint8Array(8), 1020)).toThrow(/outside the 1024-byte payload/);
  });

  it("accepts a ref copied from its own sink when dtype and size match", async () => {
    const path = fresh();
    const w = await MlPackageWriter.create(path);
    const t = tensorType("fp16", [16]);
    const ref = { ...w.blobs.write(t, fp16Random(16, 1)) };
    await w.finish(constModel({ type: t, blob: ref }));
    expect(readFileSync(weightFile(path)).length).toBe(64 + 64 + 32);
  });

  it("refuses a ref into a weight file it did not write, naming the constant", async () => {
    const path = fresh();
    const w = await MlPackageWriter.create(path);
    const t = tensorType("fp16", [16]);
    const model = constModel({ type: t, blob: { fileName: DEFAULT_BLOB_FILE_NAME, offset: 64 } });
    await expectRejects(
      w.finish(model),
      MlPackageError,
      { reason: "blob" },
      /op c \(const\).*nothing was written there/,
    );
    expect(existsSync(w.tempPath)).toBe(false);
    expect(existsSync(path)).toBe(false);
  });

  it("refuses its own ref used with a different type", async () => {
    const w = await MlPackageWriter.create(fresh());
    const ref = w.blobs.write(tensorType("fp16", [16]), fp16Random(16, 1));
    const model = constModel({ type: tensorType("fp16", [4, 5]), blob: ref });
    await expectRejects(w.finish(model), MlPackageError, { reason: "blob" }, /it holds 16 fp16 there/);
  });

  it("copies constants read from another package (once per shared blob)", async () => {
    const src = fresh();
    await writeMlPackage(src, multifunctionModel());
    const read = await readMlPackage(src);
    const dst = fresh();
    await writeMlPackage(dst, read);
    expect(materialise((await readMlPackage(dst)).program)).toEqual(
      materialise(multifunctionModel().program),
    );
    // identical bytes: the shared weight is copied once, at the same offsets
    expect(await digestMlPackage(dst)).toBe(await digestMlPackage(src));
  });
});

describe("atomic writes", () => {
  it("replaces an existing package only at the end and leaves no temporary directories", async () => {
    const path = fresh();
    await writeMlPackage(path, linearModel());
    const before = await digestMlPackage(path);
    const w = await MlPackageWriter.create(path);
    w.blobs.write(tensorType("fp16", [100]), new Uint16Array(100));
    expect(await digestMlPackage(path)).toBe(before); // still the old package, readable
    await w.finish(lutModel());
    expect(await digestMlPackage(path)).not.toBe(before);
    expect((await readMlPackage(path)).program.functions.main.block.operations[0].type).toBe(
      "constexpr_lut_to_dense",
    );
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([]);
  });

  it("abort and a failing finish leave the destination untouched", async () => {
    const path = fresh();
    await writeMlPackage(path, linearModel());
    const before = await digestMlPackage(path);
    const w = await MlPackageWriter.create(path);
    await w.abort();
    expect(existsSync(w.tempPath)).toBe(false);
    const bad = singleFunctionModel({
      inputs: [out("flag", tensorType("bool", [1]))],
      opset: "CoreML8",
      block: { inputs: [], outputs: [], operations: [] },
    });
    await expect(writeMlPackage(path, bad)).rejects.toBeInstanceOf(IoTypeError);
    expect(await digestMlPackage(path)).toBe(before);
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([]);
    await expect(w.finish(linearModel())).rejects.toThrow(/already aborted/);
  });

  it("refuses overwrite: false, a non-.mlpackage path, and a file in the way", async () => {
    const path = fresh();
    await writeMlPackage(path, linearModel());
    await expectRejects(
      MlPackageWriter.create(path, { overwrite: false }),
      MlPackageError,
      { reason: "path" },
      /overwrite: false/,
    );
    await expectRejects(
      writeMlPackage(join(dir, "x.pkg"), linearModel()),
      MlPackageError,
      { reason: "path" },
      /\.mlpackage/,
    );
    const file = join(dir, "file.mlpackage");
    writeFileSync(file, "x");
    await expectRejects(
      writeMlPackage(file, linearModel()),
      MlPackageError,
      { reason: "path" },
      /not a directory/,
    );
  });

  it("creates missing parent directories", async () => {
    const path = join(dir, "a/b/c", "m.mlpackage");
    await writeMlPackage(path, linearModel());
    expect(existsSync(modelFile(path))).toBe(true);
  });
});

describe("reader errors", () => {
  async function written(make: () => MlModel = linearModel): Promise<string> {
    const path = fresh();
    await writeMlPackage(path, make());
    return path;
  }
  const manifestPath = (p: string) => join(p, "Manifest.json");
  type ManifestJson = {
    itemInfoEntries: Record<string, Record<string, string>>;
    rootModelIdentifier?: string;
  };
  const editManifest = (p: string, f: (m: ManifestJson) => void) => {
    const m = JSON.parse(readFileSync(manifestPath(p), "utf8"));
    f(m);
    writeFileSync(manifestPath(p), JSON.stringify(m));
  };

  it("missing Manifest.json", async () => {
    const p = await written();
    rmSync(manifestPath(p));
    await expectRejects(readMlPackage(p), MlPackageError, {
      reason: "manifest",
      path: p,
      item: "Manifest.json",
    });
  });

  it("Manifest.json that is not JSON or has a bad version", async () => {
    const p = await written();
    writeFileSync(manifestPath(p), "{nope");
    await expectRejects(readMlPackage(p), MlPackageError, { reason: "manifest" }, /not valid JSON/);
    writeFileSync(
      manifestPath(p),
      JSON.stringify({ fileFormatVersion: "2.0.0", itemInfoEntries: {}, rootModelIdentifier: "x" }),
    );
    await expectRejects(readMlPackage(p), MlPackageError, { reason: "manifest" }, /newer than 1\.0\.0/);
  });

  it("a manifest item missing a key, or pointing at a missing file", async () => {
    const p = await written();
    let weightsId = "";
    editManifest(p, (m) => {
      weightsId = Object.keys(m.itemInfoEntries).find((k) => m.itemInfoEntries[k].name === "weights")!;
      delete m.itemInfoEntries[weightsId].author;
    });
    await expectRejects(
      readMlPackage(p),
      MlPackageError,
      { reason: "item", item: weightsId },
      /lacks a string "author"/,
    );
    const q = await written();
    rmSync(join(q, "Data/com.apple.CoreML/weights"), { recursive: true });
    await expectRejects(
      readMlPackage(q),
      MlPackageError,
      { reason: "item" },
      /Data\/com\.apple\.CoreML\/weights, which does not exist/,
    );
  });

  it("root model id missing or naming no item", async () => {
    const p = await written();
    editManifest(p, (m) => {
      delete m.rootModelIdentifier;
    });
    await expectRejects(
      readMlPackage(p),
      MlPackageError,
      { reason: "root" },
      /rootModelIdentifier is missing/,
    );
    editManifest(p, (m) => {
      m.rootModelIdentifier = "NOPE";
    });
    await expectRejects(readMlPackage(p), MlPackageError, { reason: "root", item: "NOPE" });
  });

  it("a model.mlmodel that is not a protobuf Model, or not an ML Program", async () => {
    const p = await written();
    writeFileSync(modelFile(p), Uint8Array.of(0x0a, 0xff, 0xff, 0xff));
    await expectRejects(readMlPackage(p), MlPackageError, {
      reason: "model",
      item: "Data/com.apple.CoreML/model.mlmodel",
    });
    writeFileSync(modelFile(p), encodeModelProto({ specificationVersion: 4, description: {} }));
    await expectRejects(readMlPackage(p), MlPackageError, { reason: "not-ml-program" }, /not an ML Program/);
  });

  it("an unsupported program construct, naming the op", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      m.mlProgram!.functions!.main.block_specializations!.CoreML8.operations![2].blocks = [{}];
    });
    await expectRejects(
      readMlPackage(p),
      MlPackageError,
      { reason: "program" },
      /op y \(linear\): nested blocks/,
    );
  });

  const firstBlob = (m: ModelProto) =>
    m.mlProgram!.functions!.main.block_specializations!.CoreML8.operations![0].attributes!.val;

  it("a blob offset out of range", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      firstBlob(m).blobFileValue!.offset = 1 << 20;
    });
    const e = (await expectRejects(readMlPackage(p), BlobFormatError, {
      reason: "offset",
      offset: 1 << 20,
      file: weightFile(p),
    })) as Error;
    expect(e.message).toMatch(/op w \(const\)/);
  });

  it("a blob offset that lands on a payload (bad sentinel)", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      firstBlob(m).blobFileValue!.offset = 128;
    });
    await expectRejects(readMlPackage(p), BlobFormatError, { reason: "sentinel", offset: 128 });
  });

  it("a blob whose dtype disagrees with the program", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      firstBlob(m).type!.tensorType!.dataType = 11; // fp32 in MIL.proto
      m.mlProgram!.functions!.main.block_specializations!.CoreML8.operations![0].outputs![0].type!
        .tensorType!.dataType = 11;
    });
    await expectRejects(
      readMlPackage(p),
      BlobFormatError,
      { reason: "dtype", offset: 64 },
      /fp16 does not match the requested fp32/,
    );
  });

  it("a blob fileName outside @model_path or leaving the package", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      firstBlob(m).blobFileValue!.fileName = "weights/weight.bin";
    });
    await expectRejects(
      readMlPackage(p),
      MlPackageError,
      { reason: "blob" },
      /does not start with @model_path/,
    );
    await patchModel(p, (m) => {
      firstBlob(m).blobFileValue!.fileName = "@model_path/../../../../etc/passwd";
    });
    await expectRejects(readMlPackage(p), MlPackageError, { reason: "blob" }, /leaves the package/);
  });

  it("verifyBlobs: false defers blob checks to load()", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      firstBlob(m).blobFileValue!.offset = 128;
    });
    const model = await readMlPackage(p, { verifyBlobs: false });
    const w = model.program.functions.main.block.operations[0].value as Extract<
      ConstValue,
      { blob: unknown }
    >;
    expect(() => w.load!()).toThrow(BlobFormatError);
  });

  describe("a ModelDescription that disagrees with the program", () => {
    const desc = (m: ModelProto) => m.description!;
    const cases: [string, () => MlModel, (m: ModelProto) => void, string, string, RegExp][] = [
      [
        "output shape",
        linearModel,
        (m) => {
          desc(m).output![0].type!.multiArrayType!.shape = [1, 4, 31];
        },
        "y",
        "shape",
        /output y has shape \[1, 4, 31\] in the description, \[1, 4, 32\] in the program/,
      ],
      [
        "output name",
        linearModel,
        (m) => {
          desc(m).output![0].name = "logits";
        },
        "y",
        "name",
        /output 0 is named logits in the description, y in the program/,
      ],
      [
        "input dtype",
        linearModel,
        (m) => {
          desc(m).input![0].type!.multiArrayType!.dataType = 65568;
        },
        "x",
        "dtype",
        /input x has dataType FLOAT32 in the description, FLOAT16 in the program/,
      ],
      [
        "input order",
        statefulModel,
        (m) => {
          desc(m).input!.reverse();
        },
        "k",
        "name",
        /input 0 is named end/,
      ],
      [
        "a missing output",
        linearModel,
        (m) => {
          desc(m).output = [];
        },
        "outputs of main",
        "count",
        /lists 0 output\(s\) \[\], the program has 1 \[y\]/,
      ],
      [
        "a state described as an input",
        statefulModel,
        (m) => {
          desc(m).state![0].type = { multiArrayType: desc(m).state![0].type!.stateType!.arrayType };
        },
        "k_cache",
        "kind",
        /state k_cache is not described as a stateType/,
      ],
      [
        "the default function",
        multifunctionModel,
        (m) => {
          desc(m).defaultFunctionName = "main";
        },
        "main",
        "function",
        /defaultFunctionName main is not one of the program's functions \[prefill, decode\]/,
      ],
      [
        "the function list",
        multifunctionModel,
        (m) => {
          desc(m).functions!.pop();
        },
        "prefill, decode",
        "function",
        /the description lists functions \[prefill\], the program has \[prefill, decode\]/,
      ],
      [
        "a function's output shape",
        multifunctionModel,
        (m) => {
          desc(m).functions![1].output![0].type!.multiArrayType!.shape = [1, 4, 8];
        },
        "y",
        "shape",
        /function decode: output y has shape \[1, 4, 8\]/,
      ],
    ];
    for (const [what, make, mutate, feature, field, message] of cases) {
      it(what, async () => {
        const p = await written(make);
        await patchModel(p, mutate);
        await expectRejects(
          readMlPackage(p),
          DescriptionMismatchError,
          { reason: "description", feature, field },
          message,
        );
      });
    }
  });

  it("a program input whose type Core ML cannot describe", async () => {
    const p = await written();
    await patchModel(p, (m) => {
      m.mlProgram!.functions!.main.inputs![0].type!.tensorType!.dataType = 24; // int64
    });
    await expectRejects(
      readMlPackage(p),
      MlPackageError,
      { reason: "io-type" },
      /input x has type tensor<int64/,
    );
  });

  it("runs the check hook after the structural checks and lets its error through", async () => {
    const p = await written();
    const seen: MlModel[] = [];
    await readMlPackage(p, { check: (m) => seen.push(m) });
    expect(seen).toHaveLength(1);
    expect(seen[0].program.functions.main.block.operations.map((o: Operation) => o.type)).toEqual([
      "const",
      "const",
      "linear",
    ]);
    await expect(
      readMlPackage(p, {
        check: () => {
          throw new Error("linear: declared type differs from inferred");
        },
      }),
    ).rejects.toThrow(/declared type differs/);
  });

  it("a directory that is not a package", async () => {
    const p = join(dir, "empty.mlpackage");
    mkdirSync(p);
    await expectRejects(readMlPackage(p), MlPackageError, { reason: "manifest" });
    await expectRejects(readMlPackage(join(dir, "missing.mlpackage")), MlPackageError, { reason: "path" });
  });
});

describe("digest", () => {
  it("is stable for equal content, independent of manifest ids, and sensitive to one weight byte", async () => {
    const a = fresh();
    const b = fresh();
    await writeMlPackage(a, linearModel());
    await writeMlPackage(b, linearModel());
    expect(readFileSync(join(a, "Manifest.json"), "utf8")).not.toBe(
      readFileSync(join(b, "Manifest.json"), "utf8"),
    );
    const da = await digestMlPackage(a);
    expect(da).toMatch(/^[0-9a-f]{64}$/);
    expect(await digestMlPackage(b)).toBe(da);
    const bytes = readFileSync(weightFile(b));
    bytes[200] ^= 1;
    writeFileSync(weightFile(b), bytes);
    expect(await digestMlPackage(b)).not.toBe(da);
  });

  it("is sha256 over model.mlmodel then weights/* by name, each framed by name and size (the bytes model.json records)", async () => {
    const a = fresh();
    await writeMlPackage(a, lutModel());
    const files = [
      ["model.mlmodel", modelFile(a)],
      ...readdirSync(join(a, "Data/com.apple.CoreML/weights"))
        .sort()
        .map((f) => [`weights/${f}`, join(a, "Data/com.apple.CoreML/weights", f)]),
    ];
    const hash = createHash("sha256");
    for (const [name, file] of files) {
      const bytes = readFileSync(file);
      hash.update(`${name}\0${bytes.length}\0`).update(bytes);
    }
    expect(await digestMlPackage(a)).toBe(hash.digest("hex"));
  });

  it("stops when its signal is aborted", async () => {
    const a = fresh();
    await writeMlPackage(a, linearModel());
    await expect(digestMlPackage(a, { signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: "AbortError",
    });
  });
});

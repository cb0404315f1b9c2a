import { join } from "node:path";
import { InvalidArgumentError } from "@anemll-qwen35/core";
import { describe, expect, it } from "vitest";
import { BlobReader, BlobWriter } from "../../src/mil/format/blob.js";
import { describeModel, IoTypeError } from "../../src/mil/format/description.js";
import { ARRAY_DATA_TYPE, MIL_DATA_TYPE } from "../../src/mil/format/dtypes.js";
import { MilFormatError } from "../../src/mil/format/errors.js";
import {
  decodeModelProto,
  encodeModelProto,
  type ModelProto,
  type ProgramProto,
} from "../../src/mil/format/proto.js";
import {
  immediateField,
  modelFromProto,
  modelToProto,
  programFromProto,
  programToProto,
  shouldUseBlob,
  tensorValueFromProto,
  tensorValueToProto,
} from "../../src/mil/format/serialize.js";
import type { MilData, MilDType, MlModel } from "../../src/mil/program.js";
import { stateType, tensorType } from "../../src/mil/program.js";
import { scratchDir } from "../testkit.js";
import {
  constOp,
  linearModel,
  lutModel,
  materialise,
  multifunctionModel,
  op,
  out,
  singleFunctionModel,
  statefulModel,
  v,
} from "./programs.js";

const dir = scratchDir("anemll-ser-");

describe("immediate values", () => {
  const cases: [MilDType, number[], MilData, string][] = [
    ["fp32", [2], Float32Array.of(1.5, -0.25), "floats"],
    ["fp64", [1], Float64Array.of(Math.PI), "doubles"],
    ["int32", [3], Int32Array.of(-1, 0, 2 ** 31 - 1), "ints"],
    ["int16", [2], Int16Array.of(-32768, 5), "ints"],
    ["uint16", [2], Uint16Array.of(65535, 5), "ints"],
    ["int64", [2], BigInt64Array.of(-(2n ** 63n), 42n), "longInts"],
    ["bool", [3], Uint8Array.of(1, 0, 1), "bools"],
    ["string", [], ["hello"], "strings"],
    ["fp16", [2], Uint16Array.of(0x3c00, 0xc000), "bytes"],
    ["bf16", [1], Uint16Array.of(0x3f80), "bytes"],
    ["int8", [2], Int8Array.of(-128, 127), "bytes"],
    ["uint8", [2], Uint8Array.of(0, 255), "bytes"],
    ["uint32", [1], Uint32Array.of(2 ** 32 - 1), "bytes"],
    ["int4", [3], Int8Array.of(-8, 7, -1), "bytes"],
    ["uint1", [9], Uint8Array.of(1, 0, 1, 1, 0, 0, 0, 0, 1), "bytes"],
    ["uint2", [5], Uint8Array.of(0, 3, 2, 1, 3), "bytes"],
    ["uint3", [3], Uint8Array.of(5, 3, 6), "bytes"],
    ["uint4", [4], Uint8Array.of(5, 3, 6, 4), "bytes"],
    ["uint6", [2], Uint8Array.of(63, 1), "bytes"],
  ];

  for (const [dtype, shape, data, field] of cases) {
    it(`${dtype} goes in TensorValue.${field} and survives the wire`, () => {
      const type = tensorType(dtype, shape);
      const tv = tensorValueToProto(type, data, "v");
      expect(Object.keys(tv)).toEqual([field]);
      expect(immediateField(dtype)).toBe(field);
      // through real protobuf bytes
      const wire = decodeModelProto(
        encodeModelProto({ mlProgram: { attributes: { v: { immediateValue: { tensor: tv } } } } }),
      );
      const back = tensorValueFromProto(type, wire.mlProgram!.attributes!.v.immediateValue!.tensor, "v");
      expect(back.constructor).toBe(data.constructor);
      expect(Array.from(back as ArrayLike<unknown>)).toEqual(Array.from(data as ArrayLike<unknown>));
    });
  }

  it("stores fp16 as little-endian bit patterns and sub-byte values packed LSB-first", () => {
    expect([
      ...tensorValueToProto(tensorType("fp16", [1]), Uint16Array.of(0x3c00), "v").bytes!.values!,
    ]).toEqual([0x00, 0x3c]);
    expect([
      ...tensorValueToProto(tensorType("uint4", [4]), Uint8Array.of(5, 3, 6, 4), "v").bytes!.values!,
    ]).toEqual([0x35, 0x46]);
  });

  it("sets the field even for empty tensors", () => {
    const tv = tensorValueToProto(tensorType("fp16", [0, 4]), new Uint16Array(0), "v");
    expect(tv.bytes).toBeDefined();
    const wire = decodeModelProto(
      encodeModelProto({ mlProgram: { attributes: { v: { immediateValue: { tensor: tv } } } } }),
    );
    expect(wire.mlProgram!.attributes!.v.immediateValue!.tensor!.bytes).toBeDefined();
    expect(
      tensorValueFromProto(
        tensorType("fp16", [0, 4]),
        wire.mlProgram!.attributes!.v.immediateValue!.tensor,
        "v",
      ).length,
    ).toBe(0);
  });

  it("rejects the wrong field, a wrong element count and out-of-range values", () => {
    expect(() => tensorValueFromProto(tensorType("fp16", [1]), { floats: { values: [1] } }, "c")).toThrow(
      /must use TensorValue.bytes, found floats/,
    );
    expect(() => tensorValueFromProto(tensorType("fp32", [3]), { floats: { values: [1] } }, "c")).toThrow(
      /needs 3 elements, the value holds 1/,
    );
    expect(() =>
      tensorValueFromProto(tensorType("fp16", [3]), { bytes: { values: new Uint8Array(4) } }, "c"),
    ).toThrow(MilFormatError);
    expect(() => tensorValueFromProto(tensorType("int16", [1]), { ints: { values: [40000] } }, "c")).toThrow(
      MilFormatError,
    );
    expect(() => tensorValueToProto(tensorType("bool", [1]), Uint8Array.of(2), "c")).toThrow(
      InvalidArgumentError,
    );
  });
});

describe("blob vs immediate (coremltools' rule)", () => {
  it("uses the weight file for >= 10 elements of blob-able dtypes, sub-byte always", () => {
    expect(shouldUseBlob(tensorType("fp16", [9]), 9)).toBe(false);
    expect(shouldUseBlob(tensorType("fp16", [10]), 9)).toBe(true);
    expect(shouldUseBlob(tensorType("fp32", [2, 5]), 6)).toBe(true);
    expect(shouldUseBlob(tensorType("int8", [10]), 6)).toBe(true);
    expect(shouldUseBlob(tensorType("int32", [10]), 8)).toBe(false);
    expect(shouldUseBlob(tensorType("int32", [10]), 9)).toBe(true);
    expect(shouldUseBlob(tensorType("uint16", [10]), 9)).toBe(true);
    expect(shouldUseBlob(tensorType("uint4", [1]), 9)).toBe(true);
    expect(shouldUseBlob(tensorType("int4", []), 9)).toBe(true);
    expect(shouldUseBlob(tensorType("int64", [100]), 9)).toBe(false);
    expect(shouldUseBlob(tensorType("bool", [100]), 9)).toBe(false);
    expect(shouldUseBlob(tensorType("fp64", [100]), 9)).toBe(false);
  });

  it("routes qualifying const vals and constexpr inputs to the sink, keeps the rest immediate", () => {
    const file = join(dir, "w.bin");
    const sink = BlobWriter.create(file);
    const big = tensorType("fp16", [1, 4, 16]);
    const model = singleFunctionModel({
      inputs: [out("x", big)],
      opset: "CoreML8",
      block: {
        inputs: [],
        outputs: ["y", "z"],
        operations: [
          constOp("small", tensorType("fp16", [9]), new Uint16Array(9)),
          constOp("ten", tensorType("fp16", [10]), new Uint16Array(10)),
          op(
            "add",
            "y",
            { x: v("x"), y: [{ kind: "value", value: { type: big, data: new Uint16Array(64) } }] },
            [out("y", big)],
          ),
          op(
            "constexpr_lut_to_dense",
            "z0",
            {
              indices: [
                {
                  kind: "value",
                  value: { type: tensorType("uint1", [2, 2]), data: Uint8Array.of(0, 1, 1, 0) },
                },
              ],
              lut: [
                {
                  kind: "value",
                  value: { type: tensorType("fp16", [1, 1, 2, 1]), data: Uint16Array.of(0, 0x3c00) },
                },
              ],
            },
            [out("z0", tensorType("fp16", [2, 2]))],
          ),
          op("identity", "z", { x: v("z0") }, [out("z", tensorType("fp16", [2, 2]))]),
        ],
      },
    });
    const proto = modelToProto(model, { blobs: sink });
    sink.finish();
    const ops = proto.mlProgram!.functions!.main.block_specializations!.CoreML8.operations!;
    expect(ops[0].attributes!.val.immediateValue).toBeDefined();
    expect(ops[1].attributes!.val.blobFileValue).toEqual({
      fileName: "@model_path/weights/weight.bin",
      offset: 64,
    });
    // a large inline value on an ordinary op stays immediate (coremltools' loader requires that)
    expect(ops[2].inputs!.y.arguments![0].value!.immediateValue).toBeDefined();
    // constexpr inputs: sub-byte always to the blob, fp16 lut of 2 elements immediate
    expect(ops[3].inputs!.indices.arguments![0].value!.blobFileValue!.offset).toBe(192);
    expect(ops[3].inputs!.lut.arguments![0].value!.immediateValue).toBeDefined();
    const reader = BlobReader.open(file);
    expect(reader.count).toBe(2);
    reader.close();
  });

  it("without a sink keeps everything immediate", () => {
    const proto = programToProto(linearModel().program);
    const w = proto.functions!.main.block_specializations!.CoreML8.operations![0];
    expect(w.attributes!.val.immediateValue!.tensor!.bytes!.values!.length).toBe(32 * 16 * 2);
  });
});

describe("program <-> proto", () => {
  it("emits coremltools' skeleton: version 1, opset-keyed block, name attributes, no docStrings", () => {
    const proto = modelToProto(statefulModel());
    const prog = proto.mlProgram!;
    expect(prog.version).toBe(1);
    expect(prog.docString).toBeUndefined();
    expect(prog.attributes).toBeUndefined();
    const fn = prog.functions!.main;
    expect(fn.opset).toBe("CoreML8");
    expect(Object.keys(fn.block_specializations!)).toEqual(["CoreML8"]);
    expect(fn.attributes).toBeUndefined();
    expect(fn.inputs!.map((i) => i.name)).toEqual(["k", "begin", "end", "k_cache"]);
    expect(fn.inputs![3].type).toEqual({
      stateType: {
        wrappedType: {
          tensorType: {
            dataType: MIL_DATA_TYPE.fp16,
            rank: 4,
            dimensions: [1, 2, 16, 8].map((size) => ({ constant: { size } })),
          },
        },
      },
    });
    const block = fn.block_specializations!.CoreML8;
    expect(block.attributes).toBeUndefined();
    expect(block.outputs).toEqual(["out"]);
    const write = block.operations!.find((o) => o.type === "write_state")!;
    expect(write.outputs).toBeUndefined();
    expect(write.attributes!.name).toEqual({
      type: { tensorType: { dataType: MIL_DATA_TYPE.string } },
      immediateValue: { tensor: { strings: { values: ["write_kc"] } } },
    });
    expect(write.inputs).toEqual({
      input: { arguments: [{ name: "k_cache" }] },
      data: { arguments: [{ name: "kc2" }] },
    });
    const two = block.operations!.find((o) => o.type === "const")!;
    expect(Object.keys(two.attributes!).sort()).toEqual(["name", "val"]);
    expect(two.inputs).toBeUndefined();
  });

  for (const [name, make] of [
    ["linear", linearModel],
    ["stateful", statefulModel],
    ["lut", lutModel],
    ["multifunction", multifunctionModel],
  ] as const) {
    it(`${name}: program -> proto -> bytes -> proto -> program is the identity`, () => {
      const model = make();
      const file = join(dir, `${name}.bin`);
      const sink = BlobWriter.create(file);
      const bytes = encodeModelProto(modelToProto(model, { blobs: sink }));
      sink.finish();
      const back = modelFromProto(decodeModelProto(bytes));
      expect(back.specificationVersion).toBe(model.specificationVersion);
      expect(back.metadata).toEqual(model.metadata);
      expect(back.defaultFunctionName).toEqual(model.defaultFunctionName);
      const reader = BlobReader.open(file);
      try {
        expect(materialise(back.program, reader)).toEqual(materialise(model.program));
      } finally {
        reader.close();
      }
      // and re-encoding what was decoded gives the same bytes
      expect(Buffer.compare(Buffer.from(encodeModelProto(modelToProto(back))), Buffer.from(bytes))).toBe(0);
    });
  }

  it("refuses const ops without a value and values on non-const ops", () => {
    const fn = (ops: MlModel["program"]["functions"]["main"]["block"]["operations"]) =>
      singleFunctionModel({
        inputs: [],
        opset: "CoreML8",
        block: { inputs: [], outputs: [], operations: ops },
      });
    const t = tensorType("fp32", [1]);
    expect(() =>
      programToProto(fn([{ type: "const", name: "c", inputs: {}, outputs: [out("c", t)] }]).program),
    ).toThrow(/const op without a value/);
    expect(() =>
      programToProto(
        fn([
          {
            type: "relu",
            name: "r",
            inputs: {},
            outputs: [out("r", t)],
            value: { type: t, data: new Float32Array(1) },
          },
        ]).program,
      ),
    ).toThrow(/only const ops carry a value/);
    expect(() => programToProto(fn([constOp("c", t, new Float64Array(1))]).program)).toThrow(/Float32Array/);
  });

  describe("rejects what the program model cannot represent, naming the place", () => {
    const base = (): ProgramProto => programToProto(linearModel().program);
    const block = (p: ProgramProto) => p.functions!.main.block_specializations!.CoreML8;
    const cases: [string, (p: ProgramProto) => void, RegExp][] = [
      [
        "flexible dimensions",
        (p) => {
          p.functions!.main.inputs![0].type!.tensorType!.dimensions![1] = { unknown: { variadic: false } };
        },
        /function main \/ input \/ x: dimension 1 is not a constant/,
      ],
      [
        "list types",
        (p) => {
          p.functions!.main.inputs![0].type = { listType: {} };
        },
        /value type listType is not supported/,
      ],
      [
        "rank/dimension disagreement",
        (p) => {
          p.functions!.main.inputs![0].type!.tensorType!.rank = 2;
        },
        /rank 2 but 3 dimensions/,
      ],
      [
        "unknown dtypes",
        (p) => {
          p.functions!.main.inputs![0].type!.tensorType!.dataType = 40;
        },
        /unsupported tensor dataType 40/,
      ],
      [
        "extra op attributes (iOS16 constexpr style)",
        (p) => {
          block(p).operations![2].attributes!.extra = block(p).operations![2].attributes!.name;
        },
        /op y \(linear\): attribute extra is not supported/,
      ],
      [
        "nested blocks",
        (p) => {
          block(p).operations![2].blocks = [{}];
        },
        /nested blocks/,
      ],
      [
        "a missing block specialization",
        (p) => {
          p.functions!.main.opset = "CoreML7";
        },
        /opset CoreML7 is not a key of block_specializations \[CoreML8\]/,
      ],
      [
        "function attributes",
        (p) => {
          p.functions!.main.attributes = { a: block(p).operations![2].attributes!.name };
        },
        /function attributes/,
      ],
      [
        "docStrings",
        (p) => {
          block(p).operations![0].attributes!.val.docString = "doc";
        },
        /docString/,
      ],
      [
        "a const without val",
        (p) => {
          delete block(p).operations![0].attributes!.val;
        },
        /const op without a val/,
      ],
      [
        "an empty binding",
        (p) => {
          block(p).operations![2].inputs!.x.arguments = [{}];
        },
        /binding 0 has neither a name nor a value/,
      ],
    ];
    for (const [what, mutate, message] of cases) {
      it(what, () => {
        const p = decodeModelProto(encodeModelProto({ mlProgram: base() })).mlProgram!;
        mutate(p);
        expect(() => programFromProto(p)).toThrow(MilFormatError);
        expect(() => programFromProto(p)).toThrow(message);
      });
    }
  });

  it("reports a Model without mlProgram as not an ML Program", () => {
    expect(() => modelFromProto({ specificationVersion: 9 } as ModelProto)).toThrow(/not an ML Program/);
  });
});

describe("ModelDescription generation", () => {
  it("describes inputs, outputs and states with Core ML array types", () => {
    const d = describeModel(statefulModel());
    expect(
      d.input!.map((f) => [f.name, f.type!.multiArrayType!.dataType, f.type!.multiArrayType!.shape]),
    ).toEqual([
      ["k", ARRAY_DATA_TYPE.FLOAT16, [1, 2, 1, 8]],
      ["begin", ARRAY_DATA_TYPE.INT32, [4]],
      ["end", ARRAY_DATA_TYPE.INT32, [4]],
    ]);
    expect(d.state).toEqual([
      {
        name: "k_cache",
        type: { stateType: { arrayType: { shape: [1, 2, 16, 8], dataType: ARRAY_DATA_TYPE.FLOAT16 } } },
      },
    ]);
    expect(d.output).toEqual([
      { name: "out", type: { multiArrayType: { shape: [1, 2, 16, 8], dataType: ARRAY_DATA_TYPE.FLOAT16 } } },
    ]);
    expect(d.functions).toBeUndefined();
  });

  it("carries user-defined metadata", () => {
    expect(describeModel(linearModel()).metadata).toEqual({
      author: "anemll-qwen35 tests",
      userDefined: { purpose: "linear" },
    });
  });

  it("describes multifunction programs per function with the default function", () => {
    const d = describeModel(multifunctionModel());
    expect(d.input).toBeUndefined();
    expect(d.defaultFunctionName).toBe("decode");
    expect(
      d.functions!.map((f) => [
        f.name,
        f.input![0].type!.multiArrayType!.shape,
        f.output![0].type!.multiArrayType!.shape,
      ]),
    ).toEqual([
      ["prefill", [1, 4, 16], [1, 4, 8]],
      ["decode", [1, 1, 16], [1, 1, 8]],
    ]);
    const noDefault = { ...multifunctionModel(), defaultFunctionName: undefined };
    expect(() => describeModel(noDefault)).toThrow(/needs a defaultFunctionName/);
    expect(() => describeModel({ ...multifunctionModel(), defaultFunctionName: "nope" })).toThrow(
      /not one of the functions/,
    );
  });

  const io = (inputType: ReturnType<typeof tensorType> | ReturnType<typeof stateType>, spec = 9) =>
    ({
      ...singleFunctionModel({
        inputs: [out("a", inputType)],
        opset: "CoreML8",
        block: { inputs: [], outputs: [], operations: [] },
      }),
      specificationVersion: spec,
    }) as MlModel;

  it("rejects I/O dtypes Core ML cannot describe, naming the feature", () => {
    for (const dtype of ["bool", "int64", "int8", "int16", "fp64", "uint8"] as MilDType[]) {
      let err: unknown;
      try {
        describeModel(io(tensorType(dtype, [2])));
      } catch (e) {
        err = e;
      }
      expect(err, dtype).toBeInstanceOf(IoTypeError);
      expect((err as IoTypeError).feature).toBe("a");
      expect((err as Error).message).toContain(`tensor<${dtype}, [2]>`);
    }
    expect(() => describeModel(io(tensorType("fp16", [2]), 6))).toThrow(/fp16 from specification version 7/);
    expect(() => describeModel(io(tensorType("fp32", [])))).toThrow(/scalar/);
    expect(() => describeModel(io(stateType(tensorType("fp32", [2]))))).toThrow(/states must be fp16/);
    expect(() => describeModel(io(stateType(tensorType("fp16", [2])), 8))).toThrow(
      /specification version >= 9/,
    );
  });

  it("rejects block outputs that name nothing or a state", () => {
    const m = (outputs: string[]) =>
      singleFunctionModel({
        inputs: [out("s", stateType(tensorType("fp16", [2])))],
        opset: "CoreML8",
        block: { inputs: [], outputs, operations: [] },
      });
    expect(() => describeModel(m(["ghost"]))).toThrow(/names no input or op output/);
    expect(() => describeModel(m(["s"]))).toThrow(/is a state/);
  });
});

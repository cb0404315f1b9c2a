import { describe, expect, it } from "vitest";
import { ARRAY_DATA_TYPE, MIL_DATA_TYPE } from "../../src/mil/format/dtypes.js";
import { MilFormatError } from "../../src/mil/format/errors.js";
import {
  coremlProtoRoot,
  decodeModelProto,
  encodeModelProto,
  type ModelProto,
} from "../../src/mil/format/proto.js";

const DT = coremlProtoRoot.lookupEnum("CoreML.Specification.MILSpec.DataType").values;
const ADT = coremlProtoRoot.lookupEnum("CoreML.Specification.ArrayFeatureType.ArrayDataType").values;

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

describe("Core ML protobuf schema", () => {
  it("keeps Apple's field names (keepCase) including block_specializations", () => {
    const fn = coremlProtoRoot.lookupType("CoreML.Specification.MILSpec.Function");
    expect(fn.fields.block_specializations.id).toBe(3);
    expect(coremlProtoRoot.lookupType("CoreML.Specification.Model").fields.specificationVersion.id).toBe(1);
  });

  it("puts mlProgram at field 502 and the description's extras at 20, 21, 100, 13", () => {
    // Tags are (field << 3) | wireType as varints.
    expect(hex(encodeModelProto({ mlProgram: {} }))).toBe("b21f00"); // 502<<3|2 = 4018
    expect(hex(encodeModelProto({ specificationVersion: 9 }))).toBe("0809");
    expect(hex(encodeModelProto({ description: { functions: [{}] } }))).toBe("1203a20100");
    expect(hex(encodeModelProto({ description: { defaultFunctionName: "f" } }))).toBe("1204aa010166");
    expect(hex(encodeModelProto({ description: { metadata: {} } }))).toBe("1203a20600");
    expect(hex(encodeModelProto({ description: { state: [{ type: { isOptional: true } }] } }))).toBe(
      "12076a051a03c03e01",
    );
  });

  it("encodes TensorValue.bytes as a single bytes field and repeated scalars packed", () => {
    const value = (tensor: object): ModelProto => ({
      mlProgram: { attributes: { v: { immediateValue: { tensor } } } },
    });
    const bytes = hex(encodeModelProto(value({ bytes: { values: Uint8Array.of(1, 2, 3) } })));
    expect(bytes).toContain("3a050a03010203"); // field 7 { field 1: 3 bytes }
    const floats = hex(encodeModelProto(value({ floats: { values: [1, 2] } })));
    expect(floats).toContain("0a0a080000803f00000040"); // RepeatedFloats { values packed: 8 bytes }
  });

  it("has the documented DataType and ArrayDataType codes, agreeing with dtypes.ts", () => {
    expect(DT.FLOAT16).toBe(10);
    expect(DT.UINT4).toBe(35);
    expect(DT.UINT3).toBe(39);
    expect(ADT.FLOAT16).toBe(65552);
    for (const [dtype, code] of Object.entries(MIL_DATA_TYPE)) {
      const name = Object.entries(DT).find(([, v]) => v === code)?.[0];
      expect(name, dtype).toBeDefined();
    }
    for (const [name, code] of Object.entries(ARRAY_DATA_TYPE)) expect(ADT[name]).toBe(code);
  });

  it("round-trips the reference's minimal example (§2.4) and keeps 64-bit values exact", () => {
    const T = (dt: string, shape: number[]) => ({
      tensorType: {
        dataType: DT[dt],
        rank: shape.length,
        dimensions: shape.map((size) => ({ constant: { size } })),
      },
    });
    const str = (s: string) => ({
      type: T("STRING", []),
      immediateValue: { tensor: { strings: { values: [s] } } },
    });
    const model: ModelProto = {
      specificationVersion: 9,
      description: {
        input: [{ name: "x", type: { multiArrayType: { shape: [1, 4, 16], dataType: ADT.FLOAT16 } } }],
        output: [{ name: "y", type: { multiArrayType: { shape: [1, 4, 32], dataType: ADT.FLOAT16 } } }],
      },
      mlProgram: {
        version: 1,
        functions: {
          main: {
            inputs: [{ name: "x", type: T("FLOAT16", [1, 4, 16]) }],
            opset: "CoreML8",
            block_specializations: {
              CoreML8: {
                outputs: ["y"],
                operations: [
                  {
                    type: "const",
                    attributes: {
                      name: str("w"),
                      val: {
                        type: T("FLOAT16", [32, 16]),
                        blobFileValue: {
                          fileName: "@model_path/weights/weight.bin",
                          offset: "9007199254740993",
                        },
                      },
                    },
                    outputs: [{ name: "w", type: T("FLOAT16", [32, 16]) }],
                  },
                  {
                    type: "const",
                    attributes: {
                      name: str("big"),
                      val: {
                        type: T("INT64", [2]),
                        immediateValue: { tensor: { longInts: { values: ["-9223372036854775808", "7"] } } },
                      },
                    },
                    outputs: [{ name: "big", type: T("INT64", [2]) }],
                  },
                ],
              },
            },
          },
        },
      },
    };
    const bytes = encodeModelProto(model);
    const back = decodeModelProto(bytes);
    const ops = back.mlProgram!.functions!.main.block_specializations!.CoreML8.operations!;
    expect(ops[0].attributes!.val.blobFileValue!.offset).toBe("9007199254740993");
    expect(ops[1].attributes!.val.immediateValue!.tensor!.longInts!.values).toEqual([
      "-9223372036854775808",
      "7",
    ]);
    expect(back.description!.input![0].type!.multiArrayType!.shape).toEqual(["1", "4", "16"]);
    // decode -> encode is byte-identical
    expect(hex(encodeModelProto(back))).toBe(hex(bytes));
  });

  it("omits proto3 defaults (rank 0 of a scalar is not written)", () => {
    const scalar = encodeModelProto({
      mlProgram: { attributes: { s: { type: { tensorType: { dataType: 2, rank: 0 } } } } },
    });
    const back = decodeModelProto(scalar);
    expect(back.mlProgram!.attributes!.s.type!.tensorType).toEqual({ dataType: 2 });
  });

  it("throws MilFormatError on bytes that are not a Model", () => {
    expect(() => decodeModelProto(Uint8Array.of(0x0a, 0xff, 0xff))).toThrow(MilFormatError);
    expect(() => decodeModelProto(Uint8Array.of(0x0a, 0xff, 0xff))).toThrow(/not a Core ML Model protobuf/);
  });
});

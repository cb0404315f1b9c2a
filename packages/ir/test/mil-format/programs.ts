/**
 * Small ML Programs built by hand (no builder) for the format tests. Every defaulted optional input
 * whose coremltools default is not None is emitted explicitly (linear's bias), as coremltools does.
 */
import { f32ToF16Bits } from "@anemll-qwen35/core";
import type { BlobReader } from "../../src/mil/format/blob.js";
import type {
  Binding,
  ConstValue,
  MilData,
  MilFunction,
  MlModel,
  NamedValueType,
  Operation,
  Program,
  TensorType,
  ValueType,
} from "../../src/mil/program.js";
import { stateType, tensorType } from "../../src/mil/program.js";
import { rng } from "../testkit.js";

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32). */
export { rng };

export function fp16Random(n: number, seed: number, scale = 0.1): Uint16Array {
  const r = rng(seed);
  return Uint16Array.from({ length: n }, () => f32ToF16Bits((r() * 2 - 1) * scale));
}

export function intRandom<T extends Int8Array | Uint8Array>(
  C: new (n: number) => T,
  n: number,
  lo: number,
  hi: number,
  seed: number,
): T {
  const r = rng(seed);
  const out = new C(n);
  for (let i = 0; i < n; i++) out[i] = lo + Math.floor(r() * (hi - lo + 1));
  return out;
}

export const v = (name: string): Binding[] => [{ kind: "var", name }];
export const imm = (type: TensorType, data: MilData): Binding[] => [{ kind: "value", value: { type, data } }];
export const out = (name: string, type: ValueType): NamedValueType => ({ name, type });

export function constOp(name: string, type: TensorType, data: MilData): Operation {
  return { type: "const", name, inputs: {}, outputs: [out(name, type)], value: { type, data } };
}

export function constValueOp(name: string, value: ConstValue): Operation {
  return { type: "const", name, inputs: {}, outputs: [out(name, value.type)], value };
}

export function op(
  type: string,
  name: string,
  inputs: Record<string, Binding[]>,
  outputs: NamedValueType[] = [out(name, tensorType("fp16", []))],
): Operation {
  return { type, name, inputs, outputs };
}

export function singleFunctionModel(fn: MilFunction, extra: Partial<MlModel> = {}): MlModel {
  return { specificationVersion: 9, program: { version: 1, functions: { main: fn } }, ...extra };
}

/** A CoreML8 model whose one function takes `inputs` and runs `operations`, returning `outputs`. */
export function mainModel(
  inputs: NamedValueType[],
  outputs: string[],
  operations: Operation[],
  extra: Partial<MlModel> = {},
): MlModel {
  return singleFunctionModel({ inputs, opset: "CoreML8", block: { inputs: [], outputs, operations } }, extra);
}

/** y = linear(x, w, b): x fp16 [1,4,16], w fp16 [32,16] (blob), b fp16 [32] (blob) -> y fp16 [1,4,32]. */
export function linearModel(options: { outputShape?: number[] } = {}): MlModel {
  const x = tensorType("fp16", [1, 4, 16]);
  const w = tensorType("fp16", [32, 16]);
  const b = tensorType("fp16", [32]);
  const y = tensorType("fp16", options.outputShape ?? [1, 4, 32]);
  return mainModel(
    [out("x", x)],
    ["y"],
    [
      constOp("w", w, fp16Random(32 * 16, 1)),
      constOp("b", b, fp16Random(32, 2)),
      op("linear", "y", { x: v("x"), weight: v("w"), bias: v("b") }, [out("y", y)]),
    ],
    { metadata: { author: "anemll-qwen35 tests", userDefined: { purpose: "linear" } } },
  );
}

/**
 * A KV-cache style update (iOS18 states):
 *   kc = read_state(k_cache); kc2 = slice_update(kc, k, begin, end); write_state(k_cache, kc2);
 *   out = mul(read_state(k_cache), 2)
 */
export function statefulModel(): MlModel {
  const cache = tensorType("fp16", [1, 2, 16, 8]);
  const k = tensorType("fp16", [1, 2, 1, 8]);
  const idx = tensorType("int32", [4]);
  const scalar = tensorType("fp16", []);
  return mainModel(
    [out("k", k), out("begin", idx), out("end", idx), out("k_cache", stateType(cache))],
    ["out"],
    [
      op("read_state", "kc", { input: v("k_cache") }, [out("kc", cache)]),
      op("slice_update", "kc2", { x: v("kc"), update: v("k"), begin: v("begin"), end: v("end") }, [
        out("kc2", cache),
      ]),
      {
        type: "write_state",
        name: "write_kc",
        inputs: { input: v("k_cache"), data: v("kc2") },
        outputs: [],
      },
      op("read_state", "kc3", { input: v("k_cache") }, [out("kc3", cache)]),
      constOp("two", scalar, Uint16Array.of(f32ToF16Bits(2))),
      op("mul", "out", { x: v("kc3"), y: v("two") }, [out("out", cache)]),
    ],
  );
}

/** y = linear(x, constexpr_lut_to_dense(uint4 indices [32,16], fp16 lut [4,1,16,1]), b): 4 LUTs over groups of 8 rows. */
export function lutModel(): MlModel {
  const x = tensorType("fp16", [1, 4, 16]);
  const indices = tensorType("uint4", [32, 16]);
  const lut = tensorType("fp16", [4, 1, 16, 1]);
  const w = tensorType("fp16", [32, 16]);
  const b = tensorType("fp16", [32]);
  return mainModel(
    [out("x", x)],
    ["y"],
    [
      op(
        "constexpr_lut_to_dense",
        "w_pal",
        {
          indices: imm(indices, intRandom(Uint8Array, 32 * 16, 0, 15, 3)),
          lut: imm(lut, fp16Random(64, 4)),
        },
        [out("w_pal", w)],
      ),
      constOp("b", b, new Uint16Array(32)),
      op("linear", "y", { x: v("x"), weight: v("w_pal"), bias: v("b") }, [
        out("y", tensorType("fp16", [1, 4, 32])),
      ]),
    ],
  );
}

/** y = linear(x, constexpr_blockwise_shift_scale(data int8|int4 [32,64], scale fp16 [32,2]), b): blocks of 32 inputs. */
export function blockwiseModel(dtype: "int8" | "int4"): MlModel {
  const x = tensorType("fp16", [1, 3, 64]);
  const data = tensorType(dtype, [32, 64]);
  const scale = tensorType("fp16", [32, 2]);
  const w = tensorType("fp16", [32, 64]);
  const b = tensorType("fp16", [32]);
  const [lo, hi] = dtype === "int4" ? [-8, 7] : [-128, 127];
  return mainModel(
    [out("x", x)],
    ["y"],
    [
      op(
        "constexpr_blockwise_shift_scale",
        "w_q",
        {
          data: imm(data, intRandom(Int8Array, 32 * 64, lo, hi, 5)),
          scale: imm(scale, fp16Random(64, 6, 0.01)),
        },
        [out("w_q", w)],
      ),
      constOp("b", b, fp16Random(32, 7)),
      op("linear", "y", { x: v("x"), weight: v("w_q"), bias: v("b") }, [
        out("y", tensorType("fp16", [1, 3, 32])),
      ]),
    ],
  );
}

/** Two functions (prefill/decode) sharing one weight, as a multifunction package does. */
export function multifunctionModel(): MlModel {
  const w = tensorType("fp16", [8, 16]);
  const wData = fp16Random(8 * 16, 8);
  const fn = (seq: number): MilFunction => ({
    inputs: [out("x", tensorType("fp16", [1, seq, 16]))],
    opset: "CoreML8",
    block: {
      inputs: [],
      outputs: ["y"],
      operations: [
        constOp("w", w, wData),
        constOp("b", tensorType("fp16", [8]), new Uint16Array(8)),
        op("linear", "y", { x: v("x"), weight: v("w"), bias: v("b") }, [
          out("y", tensorType("fp16", [1, seq, 8])),
        ]),
      ],
    },
  });
  return {
    specificationVersion: 9,
    program: { version: 1, functions: { prefill: fn(4), decode: fn(1) } },
    defaultFunctionName: "decode",
  };
}

/** Every constant of a program with its data materialised (loads blobs), for comparisons. */
export function materialise(program: Program, blobs?: BlobReader): unknown {
  const value = (c: ConstValue) => {
    if ("data" in c)
      return {
        type: c.type,
        data: Array.from(c.data as ArrayLike<unknown>, (x) => (typeof x === "bigint" ? x.toString() : x)),
      };
    const data = c.load ? c.load() : blobs!.read(c.blob.offset, c.type);
    return {
      type: c.type,
      data: Array.from(data as ArrayLike<unknown>, (x) => (typeof x === "bigint" ? x.toString() : x)),
    };
  };
  return Object.fromEntries(
    Object.entries(program.functions).map(([name, fn]) => [
      name,
      {
        inputs: fn.inputs,
        opset: fn.opset,
        outputs: fn.block.outputs,
        ops: fn.block.operations.map((o) => ({
          type: o.type,
          name: o.name,
          outputs: o.outputs,
          value: o.value ? value(o.value) : undefined,
          inputs: Object.fromEntries(
            Object.entries(o.inputs).map(([k, bs]) => [
              k,
              bs.map((b) => (b.kind === "var" ? b.name : value(b.value))),
            ]),
          ),
        })),
      },
    ]),
  );
}

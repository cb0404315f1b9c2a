/**
 * Constants: `const` and the iOS18 weight-decompression ops constexpr_lut_to_dense and
 * constexpr_blockwise_shift_scale. Their outputs are compile-time constants: the interpreter
 * evaluates them once and caches the result.
 * Sources: coremltools ops/defs/iOS18/compression.py (_validate_lut_inputs,
 * _validate_shift_scale_inputs, decompress), coremltools/optimize/_utils.py (lut_to_dense).
 */
import { roundF16InPlace } from "../fp16.js";
import { PackedWeight } from "../kernels/packed.js";
import { allocWeightF32 } from "../kernels/simd.js";
import type { MilData, MilDType, TensorType } from "../program.js";
import { milDTypeBits } from "../program.js";
import { shapeStr, stridesOf } from "../shape.js";
import { f16Table, numelOf, type RtTensor } from "../values.js";
import { I32, tt } from "./common.js";
import type { OpArgs, OpDef } from "./opdef.js";

/** `const`: its value is the op's `val` attribute (Operation.value); handled by the callers. */
const constOp: OpDef = {
  type: "const",
  version: "iOS15",
  constexpr: true,
  params: [],
  infer: (a) => a.fail(undefined, "const ops carry their type in Operation.value"),
  evaluate: (a) => a.fail(undefined, "const ops are materialised from Operation.value"),
};

/** Stored values of a raw constant as numbers: fp16/bf16 bit patterns decoded, ints as is. */
function numbers(dtype: MilDType, data: MilData): ArrayLike<number> {
  if (dtype === "fp16") {
    const t = f16Table();
    const src = data as Uint16Array;
    const out = new Float32Array(src.length);
    for (let i = 0; i < src.length; i++) out[i] = t[src[i]];
    return out;
  }
  if (dtype === "bf16") {
    const src = data as Uint16Array;
    const out = new Float32Array(src.length);
    const u = new Uint32Array(out.buffer);
    for (let i = 0; i < src.length; i++) u[i] = src[i] << 16;
    return out;
  }
  return data as ArrayLike<number>;
}

/** Per-dim tables of block offsets: table[d][c] = floor(c / block_d) * stride_d. */
function blockTables(
  shape: readonly number[],
  groups: readonly number[],
  groupStrides: readonly number[],
): Int32Array[] {
  return shape.map((dim, d) => {
    const bs = dim / groups[d];
    const t = new Int32Array(dim);
    for (let c = 0; c < dim; c++) t[c] = Math.floor(c / bs) * groupStrides[d];
    return t;
  });
}

// ---------------------------------------------------------------------------------------------
// constexpr_lut_to_dense

const LUT_INDEX_DTYPES: readonly MilDType[] = ["uint1", "uint2", "uint3", "uint4", "uint6", "uint8"];

function lutCheck(a: OpArgs): { vectorAxis: number | undefined } {
  const idx = a.type("indices");
  const lut = a.type("lut");
  const r = idx.shape.length;
  if (r < 1) a.fail("indices", "must have rank >= 1");
  if (lut.shape.length !== r + 2) {
    a.fail(
      "lut",
      `must have rank ${r + 2} ([G0..G${r - 1}, 2^nbits, VECTOR_SIZE]) for ${r}-D indices, got ${shapeStr(lut.shape)}`,
    );
  }
  for (let d = 0; d < r; d++) {
    if (lut.shape[d] < 1 || idx.shape[d] % lut.shape[d] !== 0) {
      a.fail("lut", `dim ${d} (${lut.shape[d]}) must divide indices dim ${d} (${idx.shape[d]})`);
    }
  }
  const palettes = lut.shape[r];
  const nbits = milDTypeBits(idx.dtype);
  if (palettes !== 2 ** nbits)
    a.fail("lut", `has ${palettes} palette entries; ${idx.dtype} indices need ${2 ** nbits}`);
  let vectorAxis: number | undefined;
  if (a.has("vector_axis")) {
    const v = a.int("vector_axis");
    if (v < -r || v >= r) a.fail("vector_axis", `(${v}) must be in [${-r}, ${r - 1}]`);
    vectorAxis = v < 0 ? v + r : v;
  } else if (lut.shape[r + 1] > 1) {
    a.fail("vector_axis", `is required when the lut's VECTOR_SIZE (${lut.shape[r + 1]}) > 1`);
  }
  return { vectorAxis };
}

const lutToDense: OpDef = {
  type: "constexpr_lut_to_dense",
  version: "iOS18",
  doc: "iOS18 palettized weight: out = lut[block(indices)][indices] (indices uintN, same shape as out).",
  available: "iOS16",
  constexpr: true,
  params: [
    { name: "indices", dtype: "IndicesT", const: true },
    { name: "lut", dtype: "T", const: true },
    { name: "vector_axis", dtype: I32, const: true, optional: true },
  ],
  domains: { IndicesT: LUT_INDEX_DTYPES, T: ["int8", "uint8", "fp16", "fp32"] },
  infer(a) {
    const { vectorAxis } = lutCheck(a);
    const idx = a.type("indices");
    const lut = a.type("lut");
    const vs = lut.shape[lut.shape.length - 1];
    const shape = idx.shape.map((d, i) => (vs > 1 && i === vectorAxis ? d * vs : d));
    return [tt(lut.dtype, shape)];
  },
  evaluate(a, out) {
    const { vectorAxis } = lutCheck(a);
    const idx = a.raw("indices");
    const lutRaw = a.raw("lut");
    const lut = numbers(lutRaw.type.dtype, lutRaw.data);
    const ishape = idx.type.shape;
    const lshape = lutRaw.type.shape;
    const r = ishape.length;
    const P = lshape[r];
    const VS = lshape[r + 1];
    const groups = lshape.slice(0, r);
    const groupStrides = stridesOf(groups).map((s) => s * P * VS);
    const gTab = blockTables(ishape, groups, groupStrides);
    const outShape = out[0].shape;
    const oStr = stridesOf(outShape);
    const oTab = ishape.map((dim, d) => {
      const t = new Int32Array(dim);
      const mul = VS > 1 && d === vectorAxis ? VS : 1;
      for (let c = 0; c < dim; c++) t[c] = c * mul * oStr[d];
      return t;
    });
    const vStride = VS > 1 && vectorAxis !== undefined ? oStr[vectorAxis] : 0;
    const n = numelOf(outShape);
    const o = out[0].dtype === "fp16" || out[0].dtype === "fp32" ? allocWeightF32(n) : new Int32Array(n);
    const ind = idx.data as Uint8Array;
    const last = r - 1;
    const inner = ishape[last];
    const coord = new Array<number>(r).fill(0);
    const total = numelOf(ishape);
    for (let flat = 0; flat < total; flat += inner) {
      let gBase = 0;
      let oBase = 0;
      for (let d = 0; d < last; d++) {
        gBase += gTab[d][coord[d]];
        oBase += oTab[d][coord[d]];
      }
      const gl = gTab[last];
      const ol = oTab[last];
      for (let c = 0; c < inner; c++) {
        const src = gBase + gl[c] + ind[flat + c] * VS;
        const dst = oBase + ol[c];
        for (let v = 0; v < VS; v++) o[dst + v * vStride] = lut[src + v];
      }
      for (let d = last - 1; d >= 0; d--) {
        if (++coord[d] < ishape[d]) break;
        coord[d] = 0;
      }
    }
    return [{ type: out[0], data: o }];
  },
  compressed(a, out, { flushSubnormals }) {
    lutCheck(a);
    const idx = a.type("indices");
    const lutT = a.type("lut");
    const r = idx.shape.length;
    const dtype = out[0].dtype;
    // packed: float palettes grouped along dim 0 only, scalar entries (VECTOR_SIZE 1)
    if ((dtype !== "fp16" && dtype !== "fp32") || lutT.shape[r + 1] !== 1) return undefined;
    if (lutT.shape.slice(1, r).some((g) => g !== 1)) return undefined;
    const rows = idx.shape[0];
    const cols = numelOf(idx.shape) / rows;
    if (!PackedWeight.fits(rows, cols)) return undefined;
    const lutRaw = a.raw("lut");
    const lut = Float32Array.from(numbers(lutRaw.type.dtype, lutRaw.data));
    // the interpreter rounds an expanded fp16 result; rounding the palette gives the same values
    if (dtype === "fp16") roundF16InPlace(lut, flushSubnormals);
    const w = PackedWeight.lut({
      rows,
      cols,
      indexDType: idx.dtype,
      indices: a.rawBytes("indices"),
      lut,
      groups: lutT.shape[0],
    });
    return w && packedTensor(out[0], w);
  },
};

/** A tensor whose values stay packed; `data` expands them (once) for ops without a packed path. */
function packedTensor(type: TensorType, w: PackedWeight): RtTensor {
  return {
    type,
    rows: w,
    packed: w,
    get data() {
      return w.dense();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// constexpr_blockwise_shift_scale

const SRC_DTYPES: readonly MilDType[] = ["int4", "uint4", "int8", "uint8", "fp16", "fp32"];

const blockwiseShiftScale: OpDef = {
  type: "constexpr_blockwise_shift_scale",
  version: "iOS18",
  doc: "iOS18 quantized weight: out = scale · (data − offset), per block.",
  constexpr: true,
  params: [
    { name: "data", dtype: "SrcT", const: true },
    { name: "scale", dtype: "DstT", const: true },
    { name: "offset", dtype: "OffsetT", const: true, optional: true },
  ],
  domains: { SrcT: SRC_DTYPES, DstT: ["fp16", "fp32"], OffsetT: SRC_DTYPES },
  infer(a) {
    const data = a.type("data");
    const scale = a.type("scale");
    const r = data.shape.length;
    if (r < 1) a.fail("data", "must have rank >= 1");
    if (scale.shape.length !== r) a.fail("scale", `must have data's rank ${r}, got ${shapeStr(scale.shape)}`);
    for (let d = 0; d < r; d++) {
      if (scale.shape[d] < 1 || data.shape[d] % scale.shape[d] !== 0) {
        a.fail("scale", `dim ${d} (${scale.shape[d]}) must divide data dim ${d} (${data.shape[d]})`);
      }
    }
    const off = a.typeOpt("offset");
    if (off) {
      if (shapeStr(off.shape) !== shapeStr(scale.shape))
        a.fail("offset", `must have scale's shape ${shapeStr(scale.shape)}, got ${shapeStr(off.shape)}`);
      if (off.dtype !== "fp16" && off.dtype !== "fp32" && off.dtype !== data.dtype) {
        a.fail("offset", `must be fp16, fp32 or data's dtype ${data.dtype}, got ${off.dtype}`);
      }
    }
    return [tt(scale.dtype, data.shape)];
  },
  evaluate(a, out) {
    const dRaw = a.raw("data");
    const sRaw = a.raw("scale");
    const data = numbers(dRaw.type.dtype, dRaw.data);
    const scale = numbers(sRaw.type.dtype, sRaw.data);
    const offset = a.has("offset") ? numbers(a.raw("offset").type.dtype, a.raw("offset").data) : undefined;
    const shape = dRaw.type.shape;
    const r = shape.length;
    const sTab = blockTables(shape, sRaw.type.shape, stridesOf(sRaw.type.shape));
    const n = numelOf(shape);
    const o = allocWeightF32(n);
    const last = r - 1;
    const inner = shape[last];
    const sl = sTab[last];
    const coord = new Array<number>(r).fill(0);
    for (let flat = 0; flat < n; flat += inner) {
      let sBase = 0;
      for (let d = 0; d < last; d++) sBase += sTab[d][coord[d]];
      if (offset) {
        for (let c = 0; c < inner; c++) {
          const s = sBase + sl[c];
          o[flat + c] = scale[s] * (data[flat + c] - offset[s]);
        }
      } else {
        for (let c = 0; c < inner; c++) o[flat + c] = scale[sBase + sl[c]] * data[flat + c];
      }
      for (let d = last - 1; d >= 0; d--) {
        if (++coord[d] < shape[d]) break;
        coord[d] = 0;
      }
    }
    return [{ type: out[0], data: o }];
  },
  compressed(a, out, { flushSubnormals }) {
    const data = a.type("data");
    const scale = a.type("scale");
    const shape = data.shape;
    // packed: byte data, scale blocks along dims 0 and 1 only, runs of whole SIMD chunks
    if (data.dtype !== "int8" && data.dtype !== "uint8") return undefined;
    if (shape.length < 2 || scale.shape.slice(2).some((s) => s !== 1)) return undefined;
    const rows = shape[0];
    const cols = numelOf(shape) / rows;
    const blocks = scale.shape[1];
    if (!PackedWeight.fits(rows, cols) || (cols / blocks) % 16 !== 0) return undefined;
    const sRaw = a.raw("scale");
    const offset = a.has("offset") ? a.raw("offset") : undefined;
    const dtype = out[0].dtype;
    const w = PackedWeight.int8({
      rows,
      cols,
      signed: data.dtype === "int8",
      data: a.rawBytes("data"),
      scale: Float32Array.from(numbers(sRaw.type.dtype, sRaw.data)),
      rowBlocks: scale.shape[0],
      blocks,
      offset: offset && Float64Array.from(numbers(offset.type.dtype, offset.data)),
      round: dtype === "fp16" ? (flushSubnormals ? "f16-flush" : "f16") : "none",
    });
    return w && packedTensor(out[0], w);
  },
};

export const CONSTEXPR_OPS: readonly OpDef[] = [constOp, lutToDense, blockwiseShiftScale];

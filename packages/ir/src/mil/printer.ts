/**
 * A readable MIL text dump, one op per line with its result types:
 *
 *   func main<CoreML8>(%x: tensor<fp16, [1, 1, 64]>) {
 *     %w = const() : tensor<fp16, [32, 64]> = blob(weight.bin@64)
 *     %q = linear(x=%x, weight=%w, bias=%q_bias) : tensor<fp16, [1, 1, 32]>
 *   } -> (%q)
 *
 * Constants show their dtype/shape and either where they live in the weight file or a few values.
 */
import type { Binding, ConstValue, MilFunction, Operation, Program } from "./program.js";
import { typeToString } from "./program.js";
import { milDataValue, numelOf } from "./values.js";

export interface PrintOptions {
  /** Values shown for inline constants before eliding (default 6). */
  readonly maxValues?: number;
}

function fmtNumber(v: number | string | boolean): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "boolean") return String(v);
  if (Number.isInteger(v) || !Number.isFinite(v)) return String(v);
  return String(Number(v.toPrecision(6)));
}

/** "blob(weight.bin@64)" or a few values: "[1, 2, 3, … 13 more]", scalars bare. */
export function formatConst(cv: ConstValue, opts: PrintOptions = {}): string {
  if (!("data" in cv)) {
    const file = cv.blob.fileName.split("/").pop();
    return `blob(${file}@${cv.blob.offset})`;
  }
  const n = numelOf(cv.type.shape);
  const max = opts.maxValues ?? 6;
  const shown: string[] = [];
  for (let i = 0; i < Math.min(n, max); i++) shown.push(fmtNumber(milDataValue(cv.type.dtype, cv.data, i)));
  if (cv.type.shape.length === 0) return shown[0] ?? "";
  return `[${shown.join(", ")}${n > max ? `, … ${n - max} more` : ""}]`;
}

function fmtBinding(b: Binding, opts: PrintOptions): string {
  if (b.kind === "var") return `%${b.name}`;
  const t = b.value.type;
  if (numelOf(t.shape) <= (opts.maxValues ?? 6) && "data" in b.value) return formatConst(b.value, opts);
  return `${typeToString(t)}(${formatConst(b.value, opts)})`;
}

export function formatOperation(op: Operation, opts: PrintOptions = {}): string {
  const outs = op.outputs.map((o) => `%${o.name}`).join(", ");
  const lhs = outs ? `${outs} = ` : "";
  const named = op.outputs.length === 1 && op.outputs[0].name === op.name ? "" : `[name=${op.name}]`;
  const types = op.outputs.map((o) => typeToString(o.type));
  const rhsTypes =
    types.length === 0 ? "" : types.length === 1 ? ` : ${types[0]}` : ` : (${types.join(", ")})`;
  if (op.type === "const" && op.value)
    return `${lhs}const${named}()${rhsTypes} = ${formatConst(op.value, opts)}`;
  const args = Object.entries(op.inputs)
    .map(
      ([k, bs]) =>
        `${k}=${bs.length === 1 ? fmtBinding(bs[0], opts) : `(${bs.map((b) => fmtBinding(b, opts)).join(", ")})`}`,
    )
    .join(", ");
  return `${lhs}${op.type}${named}(${args})${rhsTypes}`;
}

export function printFunction(fn: MilFunction, name = "main", opts: PrintOptions = {}): string {
  const ins = fn.inputs.map((i) => `%${i.name}: ${typeToString(i.type)}`).join(", ");
  const lines = [`func ${name}<${fn.opset}>(${ins}) {`];
  for (const op of fn.block.operations) lines.push(`  ${formatOperation(op, opts)}`);
  lines.push(`} -> (${fn.block.outputs.map((o) => `%${o}`).join(", ")})`);
  return lines.join("\n");
}

export function printProgram(program: Program, opts: PrintOptions = {}): string {
  return Object.entries(program.functions)
    .map(([name, fn]) => printFunction(fn, name, opts))
    .join("\n\n");
}

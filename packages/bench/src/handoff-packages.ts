/**
 * The packages of the hand-off study, built with ir's MilBuilder: a "stage" is one near-empty op on
 * the hidden vector (y = x + c, with a distinct constant c so no compiler can drop it). A chain of
 * k one-stage packages and one package of k stages do the same arithmetic; the difference between
 * them is the cost of k − 1 package boundaries (host → predict → host).
 */
import { join } from "node:path";
import type { ComponentIO, IoTensor } from "@anemll-qwen35/ir/chain";
import { digestMlPackage, MilBuilder, tensorType, writeMlPackage } from "@anemll-qwen35/ir/mil";

export interface HandoffPackage {
  readonly name: string;
  readonly path: string;
  readonly sha256: string;
  readonly io: ComponentIO;
}

function stageConst(hidden: number, index: number): Float32Array {
  // small, distinct per stage: the sum stays well inside fp16 range for any k used here
  return Float32Array.from({ length: hidden }, (_, j) => ((index + 1) * ((j % 7) - 3)) / 1024);
}

function ioFor(hidden: number): ComponentIO {
  const shape = [1, 1, hidden];
  const input: IoTensor = { name: "x", dtype: "fp16", shape, role: { kind: "hidden_in" } };
  const output: IoTensor = { name: "y", dtype: "fp16", shape, role: { kind: "hidden_out" } };
  return {
    component: "superblocks",
    dtype: "fp16",
    ctx: 1,
    state: "io",
    layers: [],
    superBlocks: [],
    inputs: [input],
    outputs: [output],
    states: [],
    notes: ["hand-off study: near-empty stages (y = x + c)"],
  };
}

/** Writes a package of stages `first … first+count-1` at `path`. */
async function writeStages(path: string, hidden: number, first: number, count: number): Promise<void> {
  const b = new MilBuilder();
  let x = b.input("x", tensorType("fp16", [1, 1, hidden]));
  for (let i = first; i < first + count; i++) {
    const c = b.const(stageConst(hidden, i), "fp16", [hidden], { name: `c_${i}` });
    x = b.add({ x, y: c, name: `stage_${i}` });
  }
  b.output("y", x);
  await writeMlPackage(path, b.model());
}

async function described(name: string, path: string, hidden: number): Promise<HandoffPackage> {
  return { name, path, sha256: await digestMlPackage(path), io: ioFor(hidden) };
}

/** k one-stage packages (`chain`) and one k-stage package (`single`), written under `dir`. */
export async function writeHandoffPackages(
  dir: string,
  hidden: number,
  k: number,
): Promise<{ chain: HandoffPackage[]; single: HandoffPackage }> {
  const chain: HandoffPackage[] = [];
  for (let i = 0; i < k; i++) {
    const path = join(dir, `h${hidden}-stage${i}.mlpackage`);
    await writeStages(path, hidden, i, 1);
    chain.push(await described(`stage${i}`, path, hidden));
  }
  const path = join(dir, `h${hidden}-fused${k}.mlpackage`);
  await writeStages(path, hidden, 0, k);
  return { chain, single: await described(`fused${k}`, path, hidden) };
}

/** The value y after all k stages, computed directly (to check the backend ran them all). */
export function expectedAfter(hidden: number, k: number, x: Float32Array): Float32Array {
  const y = Float32Array.from(x);
  for (let i = 0; i < k; i++) {
    const c = stageConst(hidden, i);
    for (let j = 0; j < hidden; j++) y[j] += c[j];
  }
  return y;
}

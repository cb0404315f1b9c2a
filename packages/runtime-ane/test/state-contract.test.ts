/**
 * The state contract, the same for every backend: a component keeps the buffers of its state plan
 * (a carried pair, a KV cache written row by row, a Core ML state), binds them itself, returns only
 * the other outputs, counts what crosses, and starts over on reset. Checked on two small packages
 * built here, on the reference backend everywhere and on Core ML (cpuOnly and the ANE) on a Mac.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { f16BitsToF32, f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import { coreMLAvailability } from "@anemll-qwen35/coreml";
import { type ComponentIO, type IoTensor, statePlan } from "@anemll-qwen35/ir/chain";
import { MilBuilder, type MlModel, tensorType, writeMlPackage } from "@anemll-qwen35/ir/mil";
import { beforeAll, describe, expect, it } from "vitest";
import { type Backend, coreMLBackend, referenceBackend } from "../src/index.js";

const W = 64; // vector width
const CTX = 8; // cache rows
const work = mkdtempSync(join(tmpdir(), "runtime-ane-state-"));

const t16 = (name: string, shape: number[], role: IoTensor["role"]): IoTensor => ({
  name,
  dtype: "fp16",
  shape,
  role,
});

function io(inputs: IoTensor[], outputs: IoTensor[], states: IoTensor[] = []): ComponentIO {
  return {
    component: "superblocks",
    dtype: "fp16",
    ctx: CTX,
    state: states.length ? "mlstate" : "io",
    layers: [0],
    superBlocks: [0],
    inputs,
    outputs,
    states,
    notes: [],
  };
}

/**
 * Carried + row-written: acc_out = acc + x; row = x (written at the step's position);
 * y = acc + Σ_rows cache, so at step t (x_s = s + 1) y = 2 · Σ_{s<t} (s + 1) = t(t + 1).
 */
function accumulator(): { model: MlModel; io: ComponentIO } {
  const b = new MilBuilder();
  const x = b.input("x", tensorType("fp16", [1, W]));
  const acc = b.input("acc", tensorType("fp16", [1, W]));
  const cache = b.input("cache", tensorType("fp16", [1, 1, CTX, W]));
  b.output("acc_out", b.add({ x: acc, y: x, name: "acc_out" }));
  b.output("row", b.reshape({ x, shape: [1, 1, 1, W], name: "row" }));
  const rows = b.reshape({
    x: b.reduceSum({ x: cache, axes: [2], name: "rows" }),
    shape: [1, W],
    name: "rows_flat",
  });
  b.output("y", b.add({ x: acc, y: rows, name: "y" }));
  return {
    model: b.model(),
    io: io(
      [
        t16("x", [1, W], { kind: "hidden_in" }),
        t16("acc", [1, W], { kind: "gdn_rec_in", layer: 0, scale: 1 }),
        t16("cache", [1, 1, CTX, W], { kind: "kv_cache", layer: 0, part: "k" }),
      ],
      [
        t16("y", [1, W], { kind: "hidden_out" }),
        t16("acc_out", [1, W], { kind: "gdn_rec_out", layer: 0, scale: 1, next: "acc" }),
        t16("row", [1, 1, 1, W], {
          kind: "kv_new",
          layer: 0,
          part: "k",
          cache: "cache",
          writeRow: "position",
        }),
      ],
    ),
  };
}

/** A Core ML state: kv += x; y = kv, so at step t (x_s = s + 1) y = Σ_{s≤t} (s + 1). */
function stateful(): { model: MlModel; io: ComponentIO } {
  const b = new MilBuilder();
  const x = b.input("x", tensorType("fp16", [1, W]));
  const kv = b.state("kv", tensorType("fp16", [1, W]));
  const now = b.add({ x: b.readState({ input: kv, name: "kv_read" }), y: x, name: "kv_sum" });
  b.output("y", b.identity({ x: b.coremlUpdateState(kv, now, { name: "kv_now" }), name: "y" }));
  return {
    model: b.model(),
    io: io(
      [t16("x", [1, W], { kind: "hidden_in" })],
      [t16("y", [1, W], { kind: "hidden_out" })],
      [t16("kv", [1, W], { kind: "kv_state", rows: [{ row: 0, layer: 0, part: "k" }] })],
    ),
  };
}

const input = (v: number): Record<string, Tensor> => ({
  x: tensor("f16", [1, W], new Uint16Array(W).fill(f32ToF16Bits(v))),
});

const values = (t: Tensor | undefined) => (t ? Array.from(toFloat32(t.dtype, t.data)) : []);
const filled = (v: number) => new Array(W).fill(f16BitsToF32(f32ToF16Bits(v)));

interface Case {
  readonly name: string;
  readonly make: () => Backend;
  /** Bytes per element of the outputs the backend returns. */
  readonly outBytes: number;
  readonly skip?: string;
}

const coreml = coreMLAvailability();
const cases: Case[] = [
  { name: "reference", make: () => referenceBackend(), outBytes: 4 },
  ...(["cpuOnly", "cpuAndNeuralEngine"] as const).map((units) => ({
    name: `coreml ${units}`,
    make: () => coreMLBackend({ computeUnits: units, cacheDir: join(work, "compiled") }),
    outBytes: 2,
    skip: coreml.available ? undefined : coreml.reason,
  })),
];

describe.each(cases)("state contract on $name", (c) => {
  const paths: Record<string, string> = {};
  beforeAll(async () => {
    for (const [name, make] of [
      ["accumulator", accumulator],
      ["stateful", stateful],
    ] as const) {
      paths[name] = join(work, `${name}.mlpackage`);
      await writeMlPackage(paths[name], make().model);
    }
  });

  const load = async (backend: Backend, name: "accumulator" | "stateful", io: ComponentIO) =>
    backend.load(paths[name], { name, functionName: "main", io, sha256: randomBytes(32).toString("hex") });

  it.skipIf(Boolean(c.skip))(
    `keeps a carried pair and a KV cache, returns only y, counts what crosses${c.skip ? ` (skipped: ${c.skip})` : ""}`,
    async () => {
      const { io: spec } = accumulator();
      const backend = c.make();
      const comp = await load(backend, "accumulator", spec);
      const state = comp.newState(statePlan("accumulator", spec));
      for (let t = 0; t < 5; t++) {
        const out = await comp.predict(input(t + 1), state, t);
        expect(Object.keys(out)).toEqual(["y"]);
        expect(values(out.y)).toEqual(filled(t * (t + 1)));
      }
      expect(backend.transfers()).toMatchObject({
        predictions: 5,
        bytesIn: 5 * W * 2,
        bytesOut: 5 * W * c.outBytes,
      });
      // each step's row went into the cache; Core ML may also have had to copy a carried output
      // it did not write into its backing (counted as a miss; the self-test reports them)
      const { bytesKept, backingMisses = 0 } = backend.transfers();
      if (backingMisses === 0) expect(bytesKept).toBe(5 * W * 2);
      else expect(bytesKept).toBeGreaterThan(5 * W * 2);
      await expect(comp.predict(input(1), state, CTX)).rejects.toThrow(/row|position|outside/);
      state.reset();
      expect(values((await comp.predict(input(1), state, 0)).y)).toEqual(filled(0));
      expect(values((await comp.predict(input(1), state, 1)).y)).toEqual(filled(2));
      comp.dispose();
    },
  );

  it.skipIf(Boolean(c.skip))(
    `keeps a Core ML state between predictions and zeroes it on reset${c.skip ? ` (skipped: ${c.skip})` : ""}`,
    async () => {
      const { io: spec } = stateful();
      const backend = c.make();
      const comp = await load(backend, "stateful", spec);
      const plan = statePlan("stateful", spec);
      expect(plan.coreStates.map((s) => s.name)).toEqual(["kv"]);
      const a = comp.newState(plan);
      const b = comp.newState(plan);
      for (let t = 0; t < 3; t++) {
        expect(values((await comp.predict(input(t + 1), a)).y)).toEqual(filled(((t + 1) * (t + 2)) / 2));
      }
      // another state of the same package starts from zeros, and the first is untouched by it
      expect(values((await comp.predict(input(5), b)).y)).toEqual(filled(5));
      expect(values((await comp.predict(input(4), a)).y)).toEqual(filled(10));
      a.reset();
      expect(values((await comp.predict(input(7), a)).y)).toEqual(filled(7));
      comp.dispose();
    },
  );
});

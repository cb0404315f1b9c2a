/**
 * The prefill function on an fp16 datapath that flushes subnormals (the interpreter's fp16 mode,
 * constants flushed as the ANE holds them), on fixtures/tiny-trained:
 *  - a short chunk of n < T tokens is padded with copies of its last hidden row (ir/chain
 *    hiddenRows): every tail length 1 … T − 1 runs without inf/NaN, and so does the decode step
 *    after it (NaN in the GDN state or a KV row would show there);
 *  - the padded rows are state-neutral: whatever they hold (copies of the last row, other values,
 *    zeros), the GDN states after the chunk, the KV rows and hidden rows of the real tokens are the
 *    same bit for bit, in fp32 and in fp16.
 * (Before: zero padding, ε = 1e-6 — 0 once flushed — and every position after a short tail NaN.)
 */
import { join } from "node:path";
import { f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import { ChainStepper, type HostSnapshot, hiddenRow } from "@anemll-qwen35/ir/chain";
import { maxAbsDiff, Qwen35Checkpoint, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import type { NonFiniteReport } from "@anemll-qwen35/ir/mil";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BuildOptions, buildComponent, type ComponentSpec } from "../src/graph/index.js";
import { type ChainPart, component, ReferenceChain } from "./chain.js";
import { fixtureDir, hasFixture } from "./golden.js";

const NAME = "tiny-trained";
const report = (what: string, value: string) => console.log(`[fp16-prefill] ${what}: ${value}`);

describe.skipIf(!hasFixture(NAME))(`fp16 prefill of short chunks (${NAME})`, () => {
  let ck: Qwen35Checkpoint;
  /** The held-out text's ids and HF's fp32 logits at each position. */
  let ids: number[];
  let hf: Float32Array[];

  beforeAll(async () => {
    ck = await Qwen35Checkpoint.open(fixtureDir(NAME));
    await using f = await SafetensorsFile.open(join(fixtureDir(NAME), "heldout.safetensors"));
    ids = Array.from((await f.read("ids")).data as BigInt64Array, Number);
    const t = await f.read("logits");
    const v = toFloat32(t.dtype, t.data);
    const V = t.shape[1];
    hf = Array.from({ length: t.shape[0] }, (_, i) => v.subarray(i * V, (i + 1) * V));
  });
  afterAll(async () => {
    await ck?.close();
  });

  async function part(spec: ComponentSpec, options: BuildOptions): Promise<ChainPart> {
    const built = await buildComponent(ck, spec, options);
    return { model: built.model, io: built.io, function: built.function, prefill: built.prefill };
  }

  it(
    "T = 64, fp16 flushed: no inf/NaN for every tail length 1 … 63, nor in the decode step after it",
    async () => {
      const T = 64;
      const o = { ctx: 128, prefillBatch: T };
      const chain = new ReferenceChain(
        {
          embed: await part({ kind: "embed" }, o),
          superblocks: [
            await part({ kind: "superblocks", first: 0, count: ck.config.superBlocks.length }, o),
          ],
          lmHead: await part({ kind: "lm_head" }, o),
        },
        { precision: "fp16", flushSubnormals: true },
      );
      let worst = 0;
      for (let n = 1; n < T; n++) {
        chain.reset();
        const p = await chain.prefill(ids.slice(0, n), 0);
        expect(p.nonFinite, `tail of ${n}`).toEqual([]);
        const s = await chain.step(ids[n], n);
        expect(s.nonFinite, `decode after a tail of ${n}`).toEqual([]);
        worst = Math.max(worst, maxAbsDiff(s.logits as Float32Array, hf[n]));
      }
      report(
        `T=${T} max |Δlogit| vs HF fp32 of the decode step after each tail 1…${T - 1}`,
        worst.toFixed(4),
      );
      expect(worst).toBeLessThan(0.15); // measured 0.060 (LUT-free fp16 weights, C 16)
    },
    timeLimit(600_000),
  );

  for (const precision of ["fp32", "fp16"] as const) {
    it(`${precision}: padded rows are state-neutral (GDN states, KV and hidden rows of the real tokens identical for any padding)`, async () => {
      const T = 8;
      const n = 5;
      const o = { ctx: 32, prefillBatch: T, dtype: precision };
      const parts = {
        embed: await part({ kind: "embed" }, o),
        sb: await part({ kind: "superblocks", first: 0, count: ck.config.superBlocks.length }, o),
        head: await part({ kind: "lm_head" }, o),
      };
      const opts = { precision, flushSubnormals: precision === "fp16" };
      const hiddenIn = parts.sb.prefill?.io.inputs.find((t) => t.role.kind === "hidden_in")?.name as string;
      /** The chain, its super-block's prefill hidden rows n … T − 1 overwritten by `pad` (undefined: the protocol's own). */
      const prefilled = async (pad?: (i: number, d: number) => number) => {
        const nonFinite: (NonFiniteReport & { component: string })[] = [];
        const sb = component("sb", parts.sb, opts, nonFinite);
        const pf = sb.prefill as NonNullable<typeof sb.prefill>;
        const repad = (h: Tensor): Tensor => {
          if (!pad) return h;
          const v = toFloat32(h.dtype, h.data).slice();
          const D = h.shape[1];
          for (let d = 0; d < D; d++) for (let i = n; i < T; i++) v[d * T + i] = pad(i, d);
          return h.dtype === "f16"
            ? tensor("f16", h.shape, Uint16Array.from(v, f32ToF16Bits))
            : tensor("f32", h.shape, v);
        };
        const stepper = new ChainStepper(
          component("embed", parts.embed, opts, nonFinite),
          [
            {
              ...sb,
              prefill: {
                ...pf,
                predict: (x, st, p) => pf.predict({ ...x, [hiddenIn]: repad(x[hiddenIn]) }, st, p),
              },
            },
          ],
          component("head", parts.head, opts, nonFinite),
        );
        const r = await stepper.prefill(ids.slice(0, n), 0, false);
        const hidden = Array.from({ length: n }, (_, i) =>
          Array.from(toFloat32(r.hidden[0].dtype, hiddenRow(r.hidden[0], i).data)),
        );
        const snap = (await stepper.snapshot(n))[0] as HostSnapshot<unknown>;
        const state = Object.fromEntries(
          [...snap.buffers].map(([k, t]) => [k, Array.from(toFloat32(t.dtype, t.data))]),
        );
        return { hidden, state, nonFinite };
      };
      const last = await prefilled();
      expect(last.nonFinite).toEqual([]);
      expect(Object.keys(last.state).some((k) => /rec/.test(k))).toBe(true);
      const noise = await prefilled((i, d) => Math.sin(7 * i + 0.3 * d) * 8);
      expect(noise.nonFinite).toEqual([]);
      expect(noise.hidden).toEqual(last.hidden);
      expect(noise.state).toEqual(last.state);
      // zero rows (the padding before) are neutral too now that fp16 epsilons are normal numbers
      const zeros = await prefilled(() => 0);
      expect(zeros.nonFinite).toEqual([]);
      expect(zeros.hidden).toEqual(last.hidden);
      expect(zeros.state).toEqual(last.state);
    });
  }
});

/**
 * Context buckets and prefill to the end (issue 25 items 1, 2): a chain converted with buckets
 * [128, 256] against the same model converted at ctx 256 alone, both fp32 on the reference
 * backend: a conversation that crosses the bucket edge gives bit-identical logits; prompts cut at
 * the bucket edge, at the window's end and past ctx (ring KV) give the token-by-token logits; one
 * bucket's functions are resident at a time; snapshots move between buckets; a model.json written
 * before buckets still loads.
 */
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { argmax, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { beforeAll, describe, expect, it } from "vitest";
import { type Backend, ChainRunner, type LoadChainOptions, referenceBackend } from "../src/index.js";

const FIXTURE = resolve(__dirname, "../../../fixtures/tiny-trained");
const work = mkdtempSync(join(tmpdir(), "runtime-ane-buckets-"));
const plain = { body: { kind: "none" }, lmHead: { kind: "none" }, embed: { kind: "none" } } as const;
const T = 16;

/** A reference backend that counts the super-block functions loaded and still resident. */
function countingBackend(): Backend & { resident: () => number; loads: string[] } {
  const inner = referenceBackend({ precision: "fp32" });
  let live = 0;
  const loads: string[] = [];
  return {
    name: inner.name,
    transfers: () => inner.transfers(),
    loads,
    resident: () => live,
    async load(path, o) {
      const c = await inner.load(path, o);
      const sb = o.io.component === "superblocks";
      if (sb) {
        live += 1 + (o.prefill ? 1 : 0);
        loads.push(`${o.functionName}${o.prefill ? `+${o.prefill.function}` : ""}`);
      }
      let gone = false;
      return {
        ...c,
        newState: (plan) => c.newState(plan),
        predict: (i, s, p) => c.predict(i, s, p),
        prefill: c.prefill,
        dispose() {
          if (sb && !gone) live -= 1 + (o.prefill ? 1 : 0);
          gone = true;
          c.dispose();
        },
      };
    },
  };
}

const logitsOf = (o: { logits?: Float32Array } | object) => {
  if (!("logits" in o) || !o.logits) throw new Error("expected logits");
  return o.logits as Float32Array;
};

/** Prompt ids from the fixture's vocabulary (deterministic). */
const ids = (n: number, seed = 7) => Array.from({ length: n }, (_, i) => ((i * 131 + seed * 17) % 500) + 3);

/** A scripted conversation: prompt, decode, a new turn, decode; every output's logits. */
async function conversation(model: ChainRunner, buckets?: number[]): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  const seen: number[] = [];
  const turn = async (tokens: number[], steps: number) => {
    let l = logitsOf(await model.prefill(tokens));
    out.push(l);
    seen.push(model.bucket);
    for (let s = 0; s < steps; s++) {
      l = logitsOf(await model.decode(argmax(l)));
      out.push(l);
      seen.push(model.bucket);
    }
  };
  await turn(ids(100), 30); // 100 → 130: decode crosses 128
  await turn(ids(70, 3), 5); // 130 → 205
  buckets?.push(...seen);
  return out;
}

describe("context buckets on the reference backend (tiny-trained, fp32)", () => {
  const dirs: Record<string, string> = {};
  beforeAll(async () => {
    for (const state of ["io", "mlstate"] as const) {
      const base = { model: FIXTURE, fuse: 1, dtype: "fp32", state, prefillBatch: T, ...plain } as const;
      dirs[`${state}-buckets`] = join(work, `${state}-buckets`);
      dirs[`${state}-single`] = join(work, `${state}-single`);
      await convert({ ...base, out: dirs[`${state}-buckets`], buckets: [128, 256] });
      await convert({ ...base, out: dirs[`${state}-single`], ctx: 256 });
    }
  }, timeLimit(300_000));

  const open = (dir: string, o: Omit<LoadChainOptions, "backend"> = {}, backend?: Backend) =>
    ChainRunner.load(dir, { ...o, backend: backend ?? referenceBackend({ precision: "fp32" }) });

  for (const state of ["io", "mlstate"] as const) {
    it(
      `${state} KV: a conversation across the bucket edge gives the single-ctx chain's logits bit for bit, one bucket resident at a time`,
      async () => {
        const manifest = JSON.parse(readFileSync(join(dirs[`${state}-buckets`], "model.json"), "utf8"));
        expect(manifest.buckets).toEqual([128, 256]);
        expect(manifest.components[1].functions.map((f: { function: string }) => f.function)).toEqual([
          "decode_128",
          "prefill_128",
          "verify_128", // tiny-trained's MTP head: a verify function per bucket
          "decode_256",
          "prefill_256",
          "verify_256",
        ]);
        const backend = countingBackend();
        const bucketed = await open(dirs[`${state}-buckets`], {}, backend);
        expect(bucketed.bucket).toBe(128);
        const seen: number[] = [];
        const got = await conversation(bucketed, seen);
        const single = await open(dirs[`${state}-single`]);
        const want = await conversation(single);
        expect(got).toHaveLength(want.length);
        for (let i = 0; i < got.length; i++)
          expect(Buffer.from(got[i].buffer)).toEqual(Buffer.from(want[i].buffer));
        // the small bucket until position 128, the large one after
        expect(seen.slice(0, 28)).toEqual(Array(28).fill(128));
        expect(seen.at(-1)).toBe(256);
        // super-block packages: 2 (fuse 1); never more than one bucket's decode + prefill each
        expect(backend.loads).toEqual([
          "decode_128+prefill_128",
          "decode_128+prefill_128",
          "decode_256+prefill_256",
          "decode_256+prefill_256",
        ]);
        expect(backend.resident()).toBe(4);
        bucketed.dispose();
        expect(backend.resident()).toBe(0);
        single.dispose();
      },
      timeLimit(300_000),
    );

    it(
      `${state} KV: prompts cut at the bucket edge and at the window's end match token by token (≤ 1e-4)`,
      async () => {
        const dir = dirs[`${state}-buckets`];
        for (const [first, second] of [
          [120, 0], // ends in bucket 128, a masked chunk of 8
          [125, 10], // a turn that crosses the bucket edge: moves up, then chunks
          [200, 56], // to the last row of the window (a masked tail at ctx)
        ]) {
          const chunked = await open(dir);
          const tbt = await open(dir, { prefillFunction: false });
          let worst = 0;
          for (const [n, seed] of [
            [first, 1],
            [second, 2],
          ]) {
            if (n === 0) continue;
            const a = logitsOf(await chunked.prefill(ids(n, seed)));
            const b = logitsOf(await tbt.prefill(ids(n, seed)));
            worst = Math.max(worst, maxAbsDiff(a, b));
          }
          expect(chunked.position).toBe(first + second);
          expect(worst).toBeLessThan(1e-4);
          chunked.dispose();
          tbt.dispose();
        }
      },
      timeLimit(300_000),
    );

    it(
      `${state} KV, ring: prefills in chunks past ctx with the token-by-token logits (≤ 1e-4)`,
      async () => {
        const dir = dirs[`${state}-buckets`];
        const o = { contextOverflow: "ring", ringSinks: 4 } as const;
        const chunked = await open(dir, o);
        const tbt = await open(dir, { ...o, prefillFunction: false });
        const predictions = (m: ChainRunner) => m.backend.transfers().predictions;
        let worst = 0;
        for (const [n, seed] of [
          [240, 1],
          [90, 2], // crosses ctx 256 and wraps
          [70, 3],
        ]) {
          const before = predictions(chunked);
          const a = logitsOf(await chunked.prefill(ids(n, seed)));
          const b = logitsOf(await tbt.prefill(ids(n, seed)));
          worst = Math.max(worst, maxAbsDiff(a, b));
          // past ctx it still runs in chunks: far fewer calls than tokens
          expect(predictions(chunked) - before).toBeLessThan(n);
        }
        expect(chunked.position).toBe(400);
        expect(worst).toBeLessThan(1e-4);
        chunked.dispose();
        tbt.dispose();
      },
      timeLimit(300_000),
    );
  }

  it(
    "a backend that writes all T rows of a chunk (as Core ML does, io KV) gets a bucket with room for them",
    async () => {
      const whole: Backend = (() => {
        const inner = referenceBackend({ precision: "fp32" });
        return {
          name: inner.name,
          transfers: () => inner.transfers(),
          async load(path, o) {
            const c = await inner.load(path, o);
            const pf = c.prefill;
            // the same function without partialRows: all T KV rows are kept
            return {
              ...c,
              prefill: pf && { io: pf.io, tokens: pf.tokens, predict: (i, s, p) => pf.predict(i, s, p) },
            };
          },
        };
      })();
      const dir = dirs["io-buckets"];
      const partial = await open(dir);
      const full = await open(dir, {}, whole);
      // 125 tokens: 8 chunks, the last one's 16 rows end at 128 — bucket 128 holds them
      const a = logitsOf(await partial.prefill(ids(125)));
      const b = logitsOf(await full.prefill(ids(125)));
      expect(full.bucket).toBe(128);
      expect(Buffer.from(b.buffer)).toEqual(Buffer.from(a.buffer));
      expect(full.backend.transfers().predictions).toBe(8 * 2 + 1); // every token in a chunk
      // 120 more from 125: the last chunk's 16 rows would end at 256 + 9; it moves up to 256, and
      // the rows past the window go token by token
      const before = full.backend.transfers().predictions;
      const c = logitsOf(await partial.prefill(ids(131, 3)));
      const d = logitsOf(await full.prefill(ids(131, 3)));
      expect(full.position).toBe(256);
      expect(maxAbsDiff(c, d)).toBeLessThan(1e-4);
      expect(full.backend.transfers().predictions - before).toBeLessThan(131);
      partial.dispose();
      full.dispose();
    },
    timeLimit(300_000),
  );

  it(
    "snapshots move between buckets; dropPrefill unloads the prefill functions after a prompt",
    async () => {
      const dir = dirs["io-buckets"];
      const model = await open(dir, { dropPrefill: true });
      await model.prefill(ids(60));
      expect(model.prefillLoaded).toBe(false);
      const snap = await model.snapshot(); // bucket 128
      await model.prefill(ids(150, 4)); // bucket 256
      expect(model.bucket).toBe(256);
      const after = logitsOf(await model.decode(5));
      await model.restore(snap);
      expect(model.bucket).toBe(128);
      expect(model.position).toBe(60);
      await model.prefill(ids(150, 4));
      expect(Buffer.from(logitsOf(await model.decode(5)).buffer)).toEqual(Buffer.from(after.buffer));
      model.dispose();
    },
    timeLimit(300_000),
  );

  it(
    "a model.json written before buckets (no buckets, no function table) loads and runs the same",
    async () => {
      const dir = join(work, "old");
      cpSync(dirs["io-single"], dir, { recursive: true });
      const file = join(dir, "model.json");
      const m = JSON.parse(readFileSync(file, "utf8"));
      delete m.buckets;
      for (const c of m.components) delete c.functions;
      writeFileSync(file, JSON.stringify(m));
      const old = await open(dir);
      const now = await open(dirs["io-single"]);
      expect(old.buckets).toEqual([256]);
      const a = logitsOf(await old.prefill(ids(40)));
      const b = logitsOf(await now.prefill(ids(40)));
      expect(Buffer.from(a.buffer)).toEqual(Buffer.from(b.buffer));
      old.dispose();
      now.dispose();
    },
    timeLimit(120_000),
  );
});

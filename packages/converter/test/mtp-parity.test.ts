/**
 * The MTP head through the converted packages on the interpreter (fp32, unquantized): at every
 * position of fixtures/tiny-trained's golden-mtp goldens (tools/oracle/oracle_mtp.py, an
 * independent fp32 forward with a KV cache), mtp.mlpackage then the lm_head's verify function give
 * the oracle's logits and head output within 1e-4 — teacher-forced (the oracle's post-norm hidden
 * states, normed = 1; HF's pre-norm last-layer states, normed = 0: the head applies the final norm)
 * and along its stored recursive drafts. The fp16 program on the interpreter's fp16 mode (the
 * ANE's stand-in: op outputs rounded, subnormals flushed) stays finite and close: its drafts are
 * the oracle's. --no-mtp leaves the head out.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { f32ToF16Bits, type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import {
  type ComponentIO,
  decodeMask,
  HostState,
  type IoTensor,
  readChainManifest,
  ropeCosSin,
  statePlan,
} from "@anemll-qwen35/ir/chain";
import { argmax, cosine, maxAbsDiff, Qwen35Checkpoint, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import { MilInterpreter, readMlPackage } from "@anemll-qwen35/ir/mil";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { convert } from "../src/index.js";
import { fixtureDir, loadFixtureGolden } from "./golden.js";

const FIXTURE = fixtureDir("tiny-trained");
const HAS = existsSync(join(FIXTURE, "golden-mtp.safetensors"));
const CTX = 256;

const f32 = (t: Tensor) => toFloat32(t.dtype, t.data);
// fp16 against the fp32 oracle (measured: max |Δlogit| 0.008 golden, 0.012 held out; cosine
// 1.00000; every top-1 and every recursive draft the oracle's; the [mtp fp16] lines print them)
const FP16_MIN_COSINE = 0.9999;
const FP16_MAX_LOGIT_DIFF = 0.05;
const FP16_TOP1 = 0.9;

/** Float values as an input of `t`'s dtype (fp16 as bit patterns). */
const feed = (t: IoTensor, v: Float32Array) =>
  t.dtype === "fp16" ? tensor("f16", t.shape, Uint16Array.from(v, f32ToF16Bits)) : tensor("f32", t.shape, v);
const input = (io: ComponentIO, kind: string): IoTensor =>
  io.inputs.find((t) => t.role.kind === kind) as IoTensor;

/**
 * A converted chain's MTP head and lm_head verify function on the interpreter: `headStep` runs one
 * head step at `position` from (hidden, token) → its output and the lm_head's logits of it.
 */
async function openHead(out: string, embed: Float32Array, D: number, precision: "fp32" | "fp16") {
  const manifest = await readChainManifest(out);
  const spec = manifest.speculative;
  if (!spec) throw new Error("no speculative section in model.json");
  const opts = { precision, flushSubnormals: precision === "fp16" };
  const mtpModel = await readMlPackage(join(out, spec.mtp.file));
  const mtp = {
    interp: new MilInterpreter(mtpModel.program, { functionName: spec.mtp.function, ...opts }),
    io: spec.mtp.io,
  };
  const lm = manifest.components.at(-1);
  if (!lm?.verify) throw new Error("the lm_head has no verify function");
  const lmModel = await readMlPackage(join(out, lm.file));
  const head = {
    interp: new MilInterpreter(lmModel.program, { functionName: lm.verify.function, ...opts }),
    io: lm.verify.io,
    rows: lm.verify.tokens,
  };
  const newState = () => new HostState(statePlan("mtp", mtp.io), () => undefined);
  async function headStep(
    state: HostState,
    hidden: Float32Array,
    token: number,
    normed: 0 | 1,
    position: number,
  ) {
    const feeds: Record<string, Tensor> = {};
    const put = (kind: string, v: Float32Array) => {
      const t = input(mtp.io, kind);
      feeds[t.name] = feed(t, v);
    };
    put("hidden_in", Float32Array.from(hidden));
    put("embedding", embed.slice(token * D, (token + 1) * D));
    put("normed", Float32Array.of(normed));
    put("mask", decodeMask("io", CTX, position));
    for (const t of mtp.io.inputs) {
      if (t.role.kind !== "rope") continue;
      const { cos, sin } = ropeCosSin(t.role, [position]);
      feeds[t.name] = feed(t, t.role.part === "cos" ? cos : sin);
    }
    const r = mtp.interp.run(state.bind(feeds)).outputs;
    const out = f32(state.keep(r, position).outputs.hidden_out);
    // the lm_head's verify function scores it in row 0 (normed = 1), the other rows unused
    const rows = new Float32Array(D * head.rows);
    for (let d = 0; d < D; d++) rows[d * head.rows] = out[d];
    const normedRows = new Float32Array(head.rows).fill(0);
    normedRows[0] = 1;
    const h = head.interp.run({
      hidden: feed(input(head.io, "hidden_in"), rows),
      normed: feed(input(head.io, "normed"), normedRows),
    }).outputs;
    const logits = f32(h.logits_0).subarray(0, h.logits_0.shape[1]);
    return { out, logits };
  }
  return { newState, headStep };
}

describe.skipIf(!HAS)(
  "the MTP head through the converted packages (fp32, and fp16 as the ANE rounds)",
  () => {
    let tmp: string;
    let goldens: Map<string, Tensor>;
    let embed: Float32Array;
    let D: number;
    let fp32: Awaited<ReturnType<typeof openHead>>;
    let fp16: Awaited<ReturnType<typeof openHead>>;
    let prenorm: Float32Array[];

    beforeAll(async () => {
      tmp = mkdtempSync(join(tmpdir(), "mtp-parity-"));
      await using ck = await Qwen35Checkpoint.open(FIXTURE);
      embed = f32(await ck.get("embed"));
      D = ck.config.hiddenSize;
      for (const dtype of ["fp32", "fp16"] as const) {
        const out = join(tmp, `chain-${dtype}`);
        await convert({ model: FIXTURE, out, ctx: CTX, dtype, quant: "none", prefillBatch: 0, workers: 1 });
        if (dtype === "fp32") fp32 = await openHead(out, embed, D, "fp32");
        else fp16 = await openHead(out, embed, D, "fp16");
      }
      await using f = await SafetensorsFile.open(join(FIXTURE, "golden-mtp.safetensors"));
      goldens = new Map();
      for (const name of f.names()) goldens.set(name, await f.read(name));
      prenorm = (await loadFixtureGolden("tiny-trained")).lastLayerPrenorm;
    }, 300_000);
    afterAll(() => rmSync(tmp, { recursive: true, force: true }));

    const ids = (name: string) => Array.from(goldens.get(name)?.data as BigInt64Array, Number);
    const rowOf = (name: string, ...index: number[]) => {
      const t = goldens.get(name) as Tensor;
      const v = f32(t);
      const last = t.shape.at(-1) as number;
      let offset = 0;
      for (const [i, x] of index.entries()) offset = offset * t.shape[i] + x;
      return v.subarray(offset * last, (offset + 1) * last);
    };
    const headStep: typeof fp32.headStep = (...a) => fp32.headStep(...a);
    const newState = () => fp32.newState();

    for (const set of ["golden", "heldout"] as const) {
      it(`${set}: every position's logits and head output, teacher-forced (normed = 1)`, async () => {
        const seq = ids(`${set}_ids`);
        const state = newState();
        let worst = 0;
        for (let t = 0; t < seq.length - 1; t++) {
          const r = await headStep(state, rowOf(`${set}_hidden`, t), seq[t + 1], 1, t);
          worst = Math.max(
            worst,
            maxAbsDiff(r.logits, rowOf(`${set}_logits`, t)),
            maxAbsDiff(r.out, rowOf(`${set}_mtp_hidden`, t)),
          );
        }
        expect(worst).toBeLessThanOrEqual(1e-4);
      });

      it(`${set}: the stored recursive drafts (3 steps from each start)`, async () => {
        const seq = ids(`${set}_ids`);
        const starts = ids(`${set}_draft_positions`);
        const drafts = ids(`${set}_draft_ids`);
        let worst = 0;
        for (const [k, t0] of starts.entries()) {
          const state = newState();
          for (let t = 0; t < t0; t++) await headStep(state, rowOf(`${set}_hidden`, t), seq[t + 1], 1, t);
          let hidden = rowOf(`${set}_hidden`, t0);
          let token = seq[t0 + 1];
          for (let s = 0; s < 3; s++) {
            const r = await headStep(state, hidden, token, 1, t0 + s);
            worst = Math.max(worst, maxAbsDiff(r.logits, rowOf(`${set}_draft_logits`, k, s)));
            expect(argmax(r.logits)).toBe(drafts[k * 3 + s]);
            hidden = r.out;
            token = argmax(r.logits);
          }
        }
        expect(worst).toBeLessThanOrEqual(1e-4);
      });
    }

    it("golden: from the trunk's pre-norm hidden states (normed = 0, the head applies the final norm)", async () => {
      const seq = ids("golden_ids");
      const state = newState();
      let worst = 0;
      expect(prenorm.length).toBeGreaterThanOrEqual(4); // HF's last-layer states of the prompt
      for (let t = 0; t < prenorm.length; t++) {
        const r = await headStep(state, prenorm[t], seq[t + 1], 0, t);
        worst = Math.max(worst, maxAbsDiff(r.logits, rowOf("golden_logits", t)));
      }
      expect(worst).toBeLessThanOrEqual(1e-4);
    });

    for (const set of ["golden", "heldout"] as const) {
      it(`${set}, fp16 program on the fp16 datapath (subnormals flushed): finite, close, the oracle's drafts`, async () => {
        const seq = ids(`${set}_ids`);
        const state = fp16.newState();
        let worst = 0;
        let minCos = 1;
        let top1 = 0;
        for (let t = 0; t < seq.length - 1; t++) {
          const r = await fp16.headStep(state, rowOf(`${set}_hidden`, t), seq[t + 1], 1, t);
          const want = rowOf(`${set}_logits`, t);
          expect(r.logits.every(Number.isFinite) && r.out.every(Number.isFinite), `position ${t}`).toBe(true);
          worst = Math.max(worst, maxAbsDiff(r.logits, want));
          minCos = Math.min(minCos, cosine(r.logits, want));
          if (argmax(r.logits) === argmax(want)) top1++;
        }
        console.log(
          `[mtp fp16] ${set}: max |Δlogit| ${worst.toPrecision(3)}, min cosine ${minCos.toFixed(5)}, top-1 ${top1}/${seq.length - 1}`,
        );
        expect(minCos).toBeGreaterThan(FP16_MIN_COSINE);
        expect(worst).toBeLessThan(FP16_MAX_LOGIT_DIFF);
        expect(top1).toBeGreaterThanOrEqual(Math.ceil(FP16_TOP1 * (seq.length - 1)));
      });

      it(`${set}, fp16: the recursive drafts are the oracle's`, async () => {
        const seq = ids(`${set}_ids`);
        const starts = ids(`${set}_draft_positions`);
        const drafts = ids(`${set}_draft_ids`);
        let same = 0;
        for (const [k, t0] of starts.entries()) {
          const state = fp16.newState();
          for (let t = 0; t < t0; t++)
            await fp16.headStep(state, rowOf(`${set}_hidden`, t), seq[t + 1], 1, t);
          let hidden = rowOf(`${set}_hidden`, t0);
          let token = seq[t0 + 1];
          for (let s = 0; s < 3; s++) {
            const r = await fp16.headStep(state, hidden, token, 1, t0 + s);
            token = argmax(r.logits);
            if (token === drafts[k * 3 + s]) same++;
            else break; // a later draft follows another token: not comparable
            hidden = r.out;
          }
        }
        console.log(`[mtp fp16] ${set}: ${same} of ${starts.length * 3} recursive drafts as the oracle's`);
        expect(same).toBeGreaterThanOrEqual(Math.ceil(FP16_TOP1 * starts.length * 3));
      });
    }

    it("--no-mtp leaves the head out", async () => {
      const out = join(tmp, "no-mtp");
      await convert({
        model: FIXTURE,
        out,
        ctx: CTX,
        quant: "none",
        prefillBatch: 0,
        workers: 1,
        mtp: false,
      });
      const manifest = await readChainManifest(out);
      expect(manifest.speculative).toBeUndefined();
      expect(existsSync(join(out, "mtp.mlpackage"))).toBe(false);
      expect(manifest.components.every((c) => c.verify === undefined)).toBe(true);
      // with the head, decode is a plain chain's: no select, no per-row states (only verify reads them)
      const withHead = await readChainManifest(join(tmp, "chain-fp16"));
      const decodeIo = (m: typeof manifest) =>
        m.components.filter((c) => c.kind === "superblocks").map((c) => c.io);
      expect(decodeIo(withHead)).toEqual(decodeIo(manifest));
      const verify = withHead.components.find((c) => c.kind === "superblocks")?.verify;
      expect(verify?.io.inputs.some((t) => t.role.kind === "row_select")).toBe(true);
    }, 300_000);
  },
);

/**
 * The MTP head through the converted packages on the interpreter (fp32, unquantized): at every
 * position of fixtures/tiny-trained's golden-mtp goldens (tools/oracle/oracle_mtp.py, an
 * independent fp32 forward with a KV cache), mtp.mlpackage then the lm_head's verify function give
 * the oracle's logits and head output within 1e-4 — teacher-forced (the oracle's post-norm hidden
 * states, normed = 1; HF's pre-norm last-layer states, normed = 0: the head applies the final norm)
 * and along its stored recursive drafts. --no-mtp leaves the head out.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Tensor, tensor, toFloat32 } from "@anemll-qwen35/core";
import {
  type ComponentIO,
  decodeMask,
  HostState,
  type IoTensor,
  readChainManifest,
  ropeCosSin,
  statePlan,
} from "@anemll-qwen35/ir/chain";
import { Qwen35Checkpoint, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import { MilInterpreter, readMlPackage } from "@anemll-qwen35/ir/mil";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { convert } from "../src/index.js";
import { fixtureDir, loadFixtureGolden } from "./golden.js";

const FIXTURE = fixtureDir("tiny-trained");
const HAS = existsSync(join(FIXTURE, "golden-mtp.safetensors"));
const CTX = 256;

const f32 = (t: Tensor) => toFloat32(t.dtype, t.data);
const maxAbs = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
};
const argmax = (v: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
};

describe.skipIf(!HAS)("the MTP head through the converted packages (fp32)", () => {
  let tmp: string;
  let goldens: Map<string, Tensor>;
  let embed: Float32Array;
  let D: number;
  let mtp: { interp: MilInterpreter; io: ComponentIO };
  let head: { interp: MilInterpreter; io: ComponentIO; rows: number };
  let prenorm: Float32Array[];

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), "mtp-parity-"));
    const out = join(tmp, "chain");
    await convert({
      model: FIXTURE,
      out,
      ctx: CTX,
      dtype: "fp32",
      quant: "none",
      prefillBatch: 0,
      workers: 1,
    });
    const manifest = await readChainManifest(out);
    const spec = manifest.speculative;
    if (!spec) throw new Error("no speculative section in model.json");
    const mtpModel = await readMlPackage(join(out, spec.mtp.file));
    mtp = {
      interp: new MilInterpreter(mtpModel.program, { functionName: spec.mtp.function }),
      io: spec.mtp.io,
    };
    const lm = manifest.components.at(-1);
    if (!lm?.verify) throw new Error("the lm_head has no verify function");
    const lmModel = await readMlPackage(join(out, lm.file));
    head = {
      interp: new MilInterpreter(lmModel.program, { functionName: lm.verify.function }),
      io: lm.verify.io,
      rows: lm.verify.tokens,
    };
    await using f = await SafetensorsFile.open(join(FIXTURE, "golden-mtp.safetensors"));
    goldens = new Map();
    for (const name of f.names()) goldens.set(name, await f.read(name));
    await using ck = await Qwen35Checkpoint.open(FIXTURE);
    embed = f32(await ck.get("embed"));
    D = ck.config.hiddenSize;
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
  const input = (io: ComponentIO, kind: string): IoTensor =>
    io.inputs.find((t) => t.role.kind === kind) as IoTensor;

  /** One head step at `position` from (hidden, token) → its output and the lm_head's logits of it. */
  async function headStep(
    state: HostState,
    hidden: Float32Array,
    token: number,
    normed: 0 | 1,
    position: number,
  ) {
    const feeds: Record<string, Tensor> = {
      [input(mtp.io, "hidden_in").name]: tensor("f32", [1, D, 1, 1], Float32Array.from(hidden)),
      [input(mtp.io, "embedding").name]: tensor("f32", [1, D, 1, 1], embed.slice(token * D, (token + 1) * D)),
      [input(mtp.io, "normed").name]: tensor("f32", [1, 1, 1, 1], Float32Array.of(normed)),
      [input(mtp.io, "mask").name]: tensor("f32", [1, 1, 1, CTX + 1], decodeMask("io", CTX, position)),
    };
    for (const t of mtp.io.inputs) {
      if (t.role.kind !== "rope") continue;
      const { cos, sin } = ropeCosSin(t.role, [position]);
      feeds[t.name] = tensor("f32", t.shape, t.role.part === "cos" ? cos : sin);
    }
    const r = mtp.interp.run(state.bind(feeds)).outputs;
    const out = f32(state.keep(r, position).outputs.hidden_out);
    // the lm_head's verify function scores it in row 0 (normed = 1), the other rows unused
    const rows = new Float32Array(D * head.rows);
    for (let d = 0; d < D; d++) rows[d * head.rows] = out[d];
    const normedRows = new Float32Array(head.rows).fill(0);
    normedRows[0] = 1;
    const h = head.interp.run({
      hidden: tensor("f32", [1, D, 1, head.rows], rows),
      normed: tensor("f32", [1, 1, 1, head.rows], normedRows),
    }).outputs;
    const logits = f32(h.logits_0).subarray(0, h.logits_0.shape[1]);
    return { out, logits };
  }

  for (const set of ["golden", "heldout"] as const) {
    it(`${set}: every position's logits and head output, teacher-forced (normed = 1)`, async () => {
      const seq = ids(`${set}_ids`);
      const state = new HostState(statePlan("mtp", mtp.io), () => undefined);
      let worst = 0;
      for (let t = 0; t < seq.length - 1; t++) {
        const r = await headStep(state, rowOf(`${set}_hidden`, t), seq[t + 1], 1, t);
        worst = Math.max(
          worst,
          maxAbs(r.logits, rowOf(`${set}_logits`, t)),
          maxAbs(r.out, rowOf(`${set}_mtp_hidden`, t)),
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
        const state = new HostState(statePlan("mtp", mtp.io), () => undefined);
        for (let t = 0; t < t0; t++) await headStep(state, rowOf(`${set}_hidden`, t), seq[t + 1], 1, t);
        let hidden = rowOf(`${set}_hidden`, t0);
        let token = seq[t0 + 1];
        for (let s = 0; s < 3; s++) {
          const r = await headStep(state, hidden, token, 1, t0 + s);
          worst = Math.max(worst, maxAbs(r.logits, rowOf(`${set}_draft_logits`, k, s)));
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
    const state = new HostState(statePlan("mtp", mtp.io), () => undefined);
    let worst = 0;
    expect(prenorm.length).toBeGreaterThanOrEqual(4); // HF's last-layer states of the prompt
    for (let t = 0; t < prenorm.length; t++) {
      const r = await headStep(state, prenorm[t], seq[t + 1], 0, t);
      worst = Math.max(worst, maxAbs(r.logits, rowOf("golden_logits", t)));
    }
    expect(worst).toBeLessThanOrEqual(1e-4);
  });

  it("--no-mtp leaves the head out", async () => {
    const out = join(tmp, "no-mtp");
    await convert({ model: FIXTURE, out, ctx: CTX, quant: "none", prefillBatch: 0, workers: 1, mtp: false });
    const manifest = await readChainManifest(out);
    expect(manifest.speculative).toBeUndefined();
    expect(existsSync(join(out, "mtp.mlpackage"))).toBe(false);
    expect(manifest.components.every((c) => c.verify === undefined)).toBe(true);
  }, 300_000);
});

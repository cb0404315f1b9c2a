/**
 * The self-test's first-run checks (issue 25): what a first Mac run must show before the prefill
 * function and the KV state are trusted — finite outputs for a prompt of 64 + 9 tokens (a full
 * chunk and a short masked tail), prefill against token-by-token logits, the prefill check's
 * verdict, phys_footprint with one and both functions loaded, io against mlstate decode at ctx
 * 1,024 and 4,096, and KV rows read back from the state against the reference backend. Each
 * returns what runSelftest's step() takes; the callers skip what this machine cannot run.
 */
import { mkdir, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { tensorToFloat32 } from "@anemll-qwen35/core";
import { memoryFootprint } from "@anemll-qwen35/coreml";
import type { StepOutput } from "@anemll-qwen35/generate";
import type { HostSnapshot } from "@anemll-qwen35/ir/chain";
import { argmax, cosine, maxAbsDiff } from "@anemll-qwen35/ir/checkpoint";
import type { MilState } from "@anemll-qwen35/ir/mil";
import { type Backend, ChainRunner, coreMLBackend, referenceBackend } from "@anemll-qwen35/runtime-ane";

/** The prompt's length: one chunk of the default 64 tokens, then a 9-token masked tail. */
export const FIRST_RUN_PROMPT_TOKENS = 64 + 9;
/** The contexts io and mlstate decode are compared at. */
export const DECODE_CONTEXTS = [1024, 4096] as const;
/** Below this a backend's logits are not the reference's program any more, only its neighbour. */
export const MIN_COSINE = 0.99;

export type FirstRunBackend = "reference-fp32" | "reference-fp16" | "coreml";

export interface CheckResult {
  readonly value: true;
  readonly details: Record<string, unknown>;
  readonly problem?: string;
}

/** The backend a first-run check runs on (reference fp16 flushes subnormals: the ANE's stand-in). */
export function firstRunBackend(b: FirstRunBackend): Backend {
  if (b === "coreml") return coreMLBackend({ computeUnits: "cpuAndNeuralEngine" });
  return b === "reference-fp16"
    ? referenceBackend({ precision: "fp16", flushSubnormals: true })
    : referenceBackend({ precision: "fp32" });
}

export const logitsOf = (o: StepOutput): Float32Array => {
  if (!("logits" in o)) throw new Error("the lm_head returned no logits");
  return o.logits;
};
const finite = (xs: Float32Array) => xs.every(Number.isFinite);
export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

/** `tokens` repeated to `n` tokens. */
export function promptOf(tokens: readonly number[], n: number): number[] {
  if (tokens.length === 0) throw new Error("an empty prompt cannot be repeated");
  return Array.from({ length: n }, (_, i) => tokens[i % tokens.length]);
}

/**
 * The prompt through the prefill function and token by token through decode, then one decode
 * step each: every logit finite, and the two paths' logits within rounding of each other.
 */
export async function promptCheck(
  dir: string,
  backend: FirstRunBackend,
  prompt: number[],
): Promise<CheckResult> {
  const run = async (prefillFunction: boolean) => {
    // "off": this compares the function itself, whatever the prefill check would decide
    const m = await ChainRunner.load(dir, {
      backend: firstRunBackend(backend),
      prefillFunction,
      prefillCheck: "off",
    });
    try {
      const t0 = performance.now();
      const last = logitsOf(await m.prefill(prompt));
      const ms = performance.now() - t0;
      const next = logitsOf(await m.decode(argmax(last)));
      return { last, next, ms, T: m.prefillTokens };
    } finally {
      m.dispose();
    }
  };
  const chunked = await run(true);
  const tokenByToken = await run(false);
  const d = Math.max(
    maxAbsDiff(chunked.last, tokenByToken.last),
    maxAbsDiff(chunked.next, tokenByToken.next),
  );
  const cos = Math.min(cosine(chunked.last, tokenByToken.last), cosine(chunked.next, tokenByToken.next));
  const ok = {
    prefill: finite(chunked.last) && finite(chunked.next),
    tokenByToken: finite(tokenByToken.last) && finite(tokenByToken.next),
  };
  const problems = [
    !ok.prefill && "the prefill path gave non-finite logits",
    !ok.tokenByToken && "the token-by-token path gave non-finite logits",
    chunked.T === undefined && "the chain has no prefill function to compare",
    ok.prefill &&
      ok.tokenByToken &&
      !(cos >= MIN_COSINE) &&
      `cosine between the paths fell to ${cos.toFixed(4)}`,
  ].filter((x): x is string => typeof x === "string");
  return {
    value: true,
    details: {
      summary: `${prompt.length} tokens (T ${chunked.T ?? "-"}): finite ${ok.prefill && ok.tokenByToken ? "yes" : "NO"}; prefill vs token by token max |Δ| ${d.toPrecision(3)}, min cosine ${cos.toFixed(5)}; ${chunked.ms.toFixed(0)} ms vs ${tokenByToken.ms.toFixed(0)} ms`,
      promptTokens: prompt.length,
      prefillTokens: chunked.T,
      finite: ok,
      maxAbsDiff: d,
      minCosine: cos,
      prefillMs: chunked.ms,
      tokenByTokenMs: tokenByToken.ms,
    },
    problem: problems.length ? problems.join("; ") : undefined,
  };
}

/** The prefill check on Core ML, measured again: its verdict and the one-line reason. */
export async function prefillVerdict(dir: string): Promise<CheckResult> {
  const m = await ChainRunner.load(dir, { backend: firstRunBackend("coreml"), prefillCheck: "recheck" });
  try {
    const r = m.prefillCheck;
    if (!r)
      return { value: true, details: { summary: "the chain has no prefill function: nothing to check" } };
    return { value: true, details: { summary: r.reason, ...r, prefillTokensUsed: m.prefillTokens ?? null } };
  } finally {
    m.dispose();
  }
}

/**
 * phys_footprint (task_info) after loading the chain with its decode functions only, then with
 * decode and prefill (Core ML keeps a compiled program, weights included, per loaded function).
 */
export async function memoryCheck(dir: string): Promise<CheckResult> {
  const mib = (b: number | null) => (b === null ? null : b / 2 ** 20);
  const footprint = () => memoryFootprint().physFootprint;
  const loaded = async (prefillFunction: boolean) => {
    const before = footprint();
    const m = await ChainRunner.load(dir, {
      backend: firstRunBackend("coreml"),
      prefillFunction,
      prefillCheck: "off",
    });
    // every loaded function runs once (programs may be made ready at their first prediction)
    await m.prefill(new Array<number>(m.prefillTokens ?? 1).fill(0));
    const after = footprint();
    m.dispose();
    return { before: mib(before), after: mib(after) };
  };
  const one = await loaded(false);
  const both = await loaded(true);
  const grow = (x: { before: number | null; after: number | null }) =>
    x.before === null || x.after === null ? null : x.after - x.before;
  const g1 = grow(one);
  const g2 = grow(both);
  const f = (x: number | null) => (x === null ? "?" : `${x.toFixed(1)} MiB`);
  return {
    value: true,
    details: {
      summary: `phys_footprint grows ${f(g1)} with the decode functions, ${f(g2)} with decode and prefill`,
      unit: "MiB",
      decodeOnly: one,
      decodeAndPrefill: both,
      growth: { decodeOnly: g1, decodeAndPrefill: g2 },
    },
  };
}

/**
 * io against mlstate KV at each context of DECODE_CONTEXTS: a short prompt, then `steps` decode
 * steps timed (median), and the two forms' logits compared.
 */
export async function decodeAtContexts(
  model: string,
  work: string,
  backend: FirstRunBackend,
  prompt: number[],
  steps: number,
): Promise<CheckResult> {
  const rows = [];
  const problems: string[] = [];
  const widened: number[] = [];
  for (const ctx of DECODE_CONTEXTS) {
    const runs: Record<string, { ms: number; logits: Float32Array[] }> = {};
    const source = await reaching(model, work, ctx);
    if (source !== model) widened.push(ctx);
    for (const state of ["io", "mlstate"] as const) {
      const dir = join(work, `decode-${state}-${ctx}`);
      await convert({ model: source, out: dir, ctx, state, prefillBatch: 0 });
      const m = await ChainRunner.load(dir, { backend: firstRunBackend(backend) });
      try {
        let l = logitsOf(await m.prefill(prompt));
        const logits = [l];
        const times: number[] = [];
        for (let i = 0; i < steps; i++) {
          const t = performance.now();
          l = logitsOf(await m.decode(argmax(l)));
          times.push(performance.now() - t);
          logits.push(l);
        }
        runs[state] = { ms: median(times), logits };
      } finally {
        m.dispose();
      }
    }
    const { io, mlstate } = runs;
    const d = Math.max(...io.logits.map((l, i) => maxAbsDiff(l, mlstate.logits[i])));
    const cos = Math.min(...io.logits.map((l, i) => cosine(l, mlstate.logits[i])));
    if (!(cos >= MIN_COSINE))
      problems.push(`ctx ${ctx}: io and mlstate logits differ (cosine ${cos.toFixed(4)})`);
    rows.push({
      ctx,
      ioMs: io.ms,
      mlstateMs: mlstate.ms,
      ratio: mlstate.ms / io.ms,
      maxAbsDiff: d,
      minCosine: cos,
    });
  }
  return {
    value: true,
    details: {
      summary: rows
        .map(
          (r) =>
            `ctx ${r.ctx}: io ${r.ioMs.toFixed(2)} ms, mlstate ${r.mlstateMs.toFixed(2)} ms/token (×${r.ratio.toFixed(2)}), max |Δ| ${r.maxAbsDiff.toPrecision(3)}`,
        )
        .join("; "),
      backend,
      steps,
      contexts: rows,
      ...(widened.length
        ? {
            note: `the model's max_position_embeddings is below ctx ${widened.join(", ")}: those ran on a copy whose config allows it (decode uses only the first positions, so the weights need no more)`,
          }
        : {}),
    },
    problem:
      rows.length === 0 ? "no context could be converted" : problems.length ? problems.join("; ") : undefined,
  };
}

/**
 * The checkpoint, or where its max_position_embeddings is below `ctx` a copy in `work` whose
 * config.json allows `ctx` (the other files linked, not copied).
 */
async function reaching(model: string, work: string, ctx: number): Promise<string> {
  const config = JSON.parse(await readFile(join(model, "config.json"), "utf8"));
  const text = config.text_config ?? config;
  if (!(text.max_position_embeddings < ctx)) return model;
  const dir = join(work, `model-ctx-${ctx}`);
  await mkdir(dir, { recursive: true });
  for (const f of await readdir(model))
    if (f !== "config.json") await symlink(resolve(model, f), join(dir, f));
  text.max_position_embeddings = ctx;
  await writeFile(join(dir, "config.json"), JSON.stringify(config, null, 2));
  return dir;
}

/** One array of a state snapshot, as floats. */
interface StateArray {
  readonly name: string;
  readonly shape: readonly number[];
  readonly data: Float32Array;
}

/** What ChainRunner.snapshot() keeps per super-block (not part of its public type). */
type Snapshots = { readonly states?: readonly unknown[] };

/**
 * The reference's snapshot of one super-block in the order the Core ML addon reads its state: the
 * carried buffers and KV caches (plan order), then the MLState's arrays by name, 4-D ones (KV) cut
 * to the rows written.
 */
function referenceArrays(s: HostSnapshot<MilState | undefined>): StateArray[] {
  const out: StateArray[] = [...s.buffers].map(([name, t]) => ({
    name,
    shape: t.shape,
    data: tensorToFloat32(t),
  }));
  const core = s.core;
  for (const name of core ? [...core.names()].sort() : []) {
    const t = (core as MilState).get(name, "fp32");
    const data = tensorToFloat32(t);
    if (t.shape.length !== 4) {
      out.push({ name, shape: t.shape, data });
      continue;
    }
    const [one, heads, ctx, d] = t.shape;
    const cut = new Float32Array(one * heads * s.rows * d);
    for (let h = 0; h < one * heads; h++)
      cut.set(data.subarray(h * ctx * d, (h * ctx + s.rows) * d), h * s.rows * d);
    out.push({ name, shape: [one, heads, s.rows, d], data: cut });
  }
  return out;
}

/** A Core ML state buffer as floats: fp16 or fp32, told apart by its size against the reference's. */
function coreMLArray(buffer: ArrayBuffer, like: StateArray): Float32Array {
  const n = like.data.length;
  if (buffer.byteLength === 4 * n) return new Float32Array(buffer);
  if (buffer.byteLength === 2 * n)
    return tensorToFloat32({ dtype: "f16", shape: like.shape, data: new Uint16Array(buffer) });
  throw new Error(`state array ${like.name}: ${buffer.byteLength} bytes, expected ${n} fp16 or fp32 values`);
}

/**
 * The prompt on Core ML and on the reference backend (fp32), then every super-block's state read
 * back (KV rows up to the prompt, GDN states) and compared array by array.
 */
export async function kvReadback(dir: string, prompt: number[]): Promise<CheckResult> {
  const snap = async (backend: FirstRunBackend) => {
    const m = await ChainRunner.load(dir, { backend: firstRunBackend(backend), prefillCheck: "off" });
    try {
      await m.prefill(prompt);
      const s = (await m.snapshot()) as unknown as Snapshots;
      // one state per super-block package, in chain order
      const names = m.manifest.components.filter((c) => c.kind === "superblocks").map((c) => c.name);
      return { names, states: s.states ?? [] };
    } finally {
      m.dispose();
    }
  };
  const ref = await snap("reference-fp32");
  const cm = await snap("coreml");
  const arrays = [];
  for (const [i, s] of ref.states.entries()) {
    if (!s) continue;
    const want = referenceArrays(s as HostSnapshot<MilState | undefined>);
    const got = (cm.states[i] as { buffers?: readonly ArrayBuffer[] } | undefined)?.buffers ?? [];
    if (got.length !== want.length)
      throw new Error(
        `${ref.names[i]}: Core ML read back ${got.length} state arrays, the reference has ${want.length}`,
      );
    for (const [j, w] of want.entries()) {
      const g = coreMLArray(got[j], w);
      arrays.push({
        component: ref.names[i],
        name: w.name,
        shape: w.shape,
        finite: g.every(Number.isFinite),
        maxAbsDiff: maxAbsDiff(g, w.data),
        cosine: w.data.some((x) => x !== 0) ? cosine(g, w.data) : 1,
      });
    }
  }
  const bad = arrays.filter((a) => !a.finite || !(a.cosine >= MIN_COSINE));
  const worst = Math.max(0, ...arrays.map((a) => a.maxAbsDiff));
  return {
    value: true,
    details: {
      summary: `${arrays.length} state arrays after ${prompt.length} tokens: worst max |Δ| ${worst.toPrecision(3)}, min cosine ${Math.min(1, ...arrays.map((a) => a.cosine)).toFixed(5)}`,
      rows: prompt.length,
      arrays,
    },
    problem: bad.length
      ? `state arrays differ from the reference: ${bad.map((a) => `${a.component}/${a.name}`).join(", ")}`
      : undefined,
  };
}

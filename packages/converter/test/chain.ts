/**
 * The tests' chain: embed → superblocks… → lm_head per token through the ir interpreter, driven by
 * ir's chain protocol (the same ChainStepper runtime-ane runs, each package's state kept by ir's
 * HostState as the reference backend keeps it), keeping what the tests compare:
 * every package's hidden output, the embedding and the non-finite values seen.
 */
import { f16BitsToF32, f32ToF16Bits, type Tensor, toFloat32 } from "@anemll-qwen35/core";
import {
  type ChainComponent,
  type ChainPrefillResult,
  ChainStepper,
  type ComponentIO,
  HostState,
  hiddenRow,
  type PrefillFunction,
} from "@anemll-qwen35/ir/chain";
import { argmax } from "@anemll-qwen35/ir/checkpoint";
import { MilInterpreter, type MilState, type MlModel, type NonFiniteReport } from "@anemll-qwen35/ir/mil";

export interface ChainPart {
  readonly model: MlModel;
  readonly io: ComponentIO;
  /** The default function (default "main"). */
  readonly function?: string;
  /** A super-block package's prefill function. */
  readonly prefill?: PrefillFunction;
}

export interface ChainParts {
  readonly embed: ChainPart;
  readonly superblocks: readonly ChainPart[];
  readonly lmHead: ChainPart;
}

export interface ChainOptions {
  readonly precision: "fp32" | "fp16";
  /** fp16 mode: flush subnormal results to zero, as the ANE does. */
  readonly flushSubnormals?: boolean;
}

export interface StepResult {
  /** Full-vocabulary logits (logits mode), else undefined. */
  readonly logits?: Float32Array;
  /** The greedy token. */
  readonly token: number;
  /** hidden_out of each superblocks package, in order (fp32 values). */
  readonly hidden: readonly Float32Array[];
  /** The embedding output. */
  readonly embedded: Float32Array;
  readonly nonFinite: readonly (NonFiniteReport & { component: string })[];
}

/** The interpreter as a chain component: outputs as the graph computes them, non-finite values collected. */
export function component(
  name: string,
  part: ChainPart,
  opts: ChainOptions,
  nonFinite: (NonFiniteReport & { component: string })[],
): ChainComponent {
  const interpreter = (functionName: string) =>
    new MilInterpreter(part.model.program, {
      functionName,
      precision: opts.precision,
      flushSubnormals: opts.flushSubnormals,
      onNonFinite: "collect",
    });
  const run =
    (interp: MilInterpreter) =>
    async (inputs: Record<string, Tensor>, state: unknown, position: number | undefined) => {
      const st = state instanceof HostState ? (state as HostState<MilState | undefined>) : undefined;
      const r = interp.run(st ? st.bind(inputs) : inputs, { state: st?.core });
      for (const n of r.nonFinite) nonFinite.push({ ...n, component: name });
      return st ? st.keep(r.outputs, position).outputs : r.outputs;
    };
  const interp = interpreter(part.function ?? "main");
  const pf = part.prefill;
  return {
    name,
    io: part.io,
    newState: (plan) => new HostState(plan, () => (plan.coreStates.length ? interp.newState() : undefined)),
    predict: run(interp),
    prefill: pf && { io: pf.io, tokens: pf.tokens, predict: run(interpreter(pf.function)) },
  };
}

const values = (t: Tensor): Float32Array => toFloat32(t.dtype, t.data);

/** The test's chain: ir's ChainStepper over one interpreter per package. */
export class ReferenceChain {
  private readonly stepper: ChainStepper;
  private readonly nonFinite: (NonFiniteReport & { component: string })[] = [];

  constructor(parts: ChainParts, opts: ChainOptions) {
    this.stepper = new ChainStepper(
      component("embed", parts.embed, opts, this.nonFinite),
      parts.superblocks.map((p, i) => component(`superblocks[${i}]`, p, opts, this.nonFinite)),
      component("lm_head", parts.lmHead, opts, this.nonFinite),
    );
  }

  /** Zeroes every state (sequence start). */
  reset(): void {
    this.stepper.reset();
  }

  /** Tokens per call of the super-blocks' prefill function, if they have one. */
  get prefillTokens(): number | undefined {
    return this.stepper.prefillTokens;
  }

  /**
   * Runs a chunk (at most prefillTokens tokens) at `position` through the prefill functions,
   * then the lm_head at every position of the chunk (logits mode).
   */
  async prefill(
    tokens: readonly number[],
    position: number,
  ): Promise<{ logits: Float32Array[]; hidden: Float32Array[][]; nonFinite: StepResult["nonFinite"] }> {
    this.nonFinite.length = 0;
    const r: ChainPrefillResult = await this.stepper.prefill(tokens, position, false);
    const logits: Float32Array[] = [];
    const hidden: Float32Array[][] = [];
    for (let i = 0; i < tokens.length; i++) {
      const rows = r.hidden.map((h) => values(hiddenRow(h, i)));
      hidden.push(rows);
      const head = await this.stepper.runHead(hiddenRow(r.hidden[r.hidden.length - 1], i));
      if ("logits" in head) logits.push(head.logits);
    }
    return { logits, hidden, nonFinite: [...this.nonFinite] };
  }

  /** Runs one token at `position`. */
  async step(token: number, position: number): Promise<StepResult> {
    this.nonFinite.length = 0;
    const r = await this.stepper.step(token, position, true);
    const head = r.head!;
    const common = {
      hidden: r.hidden.map(values),
      embedded: values(r.embedded),
      nonFinite: [...this.nonFinite],
    };
    if ("top1" in head) return { token: head.top1.id, ...common };
    return { logits: head.logits, token: argmax(head.logits), ...common };
  }
}

export interface RunResult {
  /** One row per step: prompt positions, then decode steps. */
  readonly logits: Float32Array[];
  /** Greedy tokens: [0] after the prompt, [i+1] after decode step i. */
  readonly tokens: number[];
  /** Top-1 of every step (prompt positions, then decode steps). */
  readonly top1: number[];
  /** Per step: hidden_out of each superblocks package. */
  readonly hidden: (readonly Float32Array[])[];
  readonly embedded: Float32Array[];
  readonly nonFinite: StepResult["nonFinite"][number][];
}

/**
 * Prompt then `decodeSteps` greedy steps. With `force`, decode step i feeds force[i] instead of
 * the model's own greedy token (teacher forcing, to compare distributions step by step).
 */
export async function runChain(
  chain: ReferenceChain,
  prompt: readonly number[],
  decodeSteps: number,
  force?: readonly number[],
): Promise<RunResult> {
  chain.reset();
  const out: RunResult = { logits: [], tokens: [], top1: [], hidden: [], embedded: [], nonFinite: [] };
  const record = (r: StepResult) => {
    out.top1.push(r.token);
    if (r.logits) out.logits.push(r.logits);
    out.hidden.push(r.hidden);
    out.embedded.push(r.embedded);
    out.nonFinite.push(...r.nonFinite);
  };
  let last: StepResult | undefined;
  for (const [p, t] of prompt.entries()) {
    last = await chain.step(t, p);
    record(last);
  }
  out.tokens.push((last as StepResult).token);
  for (let i = 0; i < decodeSteps; i++) {
    const feed = force ? force[i] : out.tokens[i];
    const r = await chain.step(feed, prompt.length + i);
    record(r);
    out.tokens.push(r.token);
  }
  return out;
}

export function f16Round(x: number): number {
  return f16BitsToF32(f32ToF16Bits(x));
}

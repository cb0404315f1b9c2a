/**
 * The `superblocks` component's interface: every input, state and output of its function with the
 * role a chain runner binds it by (ComponentIO), declared here so that superblock.ts holds only
 * the model.
 *
 * Attention scores every layer's cached rows and this step's rows apart (attention.ts), so the
 * mask has ctx + T keys in both KV placements. RoPE's cos/sin come in as inputs (the host computes
 * them for any position), so the function has no gather. With the KV in a Core ML state, the
 * function reads the state once (one state of kvRows rows that every bucket's functions share;
 * each reads its first ctx rows), and writes all layers' new rows in one slice_update at its end,
 * at bounds the host feeds (role kv_write): the function holds no int32 op, so nothing of it runs
 * on the CPU.
 */
import type { ComponentIO, GraphDType, IoTensor } from "@anemll-qwen35/ir/chain";
import type { Qwen35Config, SuperBlock } from "@anemll-qwen35/ir/checkpoint";
import { type MilBuilder, type MilVar, tensorType } from "@anemll-qwen35/ir/mil";
import type { ResolvedOptions } from "../options.js";
import { GDN_V_SCALE, MASK_NEG } from "./ane.js";
import { type AttentionCore, type AttentionStep, type KvCache, type RopeRow, ropeSpec } from "./attention.js";
import type { GdnStateIn, GdnStep } from "./gdn.js";
import type { GdnChunkInputs, GdnPrefillForm } from "./gdn-chunked.js";

/** What every layer of one step reads besides the hidden state. */
export interface StepInputs {
  readonly rope: RopeRow;
  readonly mask: MilVar;
  readonly gdn: ReadonlyMap<number, GdnStateIn>;
  readonly kv: ReadonlyMap<number, KvCache>;
  readonly attention: AttentionCore;
  /** Most intermediate channels per MLP projection (wider MLPs are split: mlp.ts). */
  readonly mlpMaxChannels: number;
  /** The prefill function: the chunk's GDN inputs (the mixers then run over T tokens). */
  readonly chunk?: GdnChunkInputs;
}

/** What the layers of one step produce besides the hidden state, by layer. */
export interface StepOutputs {
  readonly gdn: Map<number, GdnStep>;
  readonly attention: Map<number, AttentionStep>;
}

/** The prefill function's shape: T tokens a call, and how its GDN layers run the delta rule. */
export interface PrefillShape {
  readonly tokens: number;
  readonly gdnForm: GdnPrefillForm;
  readonly wyChunk: number;
  /**
   * The verify function (speculative decoding): T = k + 1 rows like a prefill chunk, whose GDN
   * states start from the row `select` picks — the kept state, or one row of the last verify's
   * per-row states — and which returns every row's states, so that accepting n rows is choosing
   * row n − 1 at the next call (no second pass; nothing advances past a rejected row).
   */
  readonly verify?: boolean;
}

/** The rope_cos / rope_sin inputs [1, 1, T, rot/2] of a step of T tokens (the host computes them). */
export function ropeInputs(
  input: (t: IoTensor) => MilVar,
  cfg: Qwen35Config,
  dt: GraphDType,
  tokens: number,
): RopeRow {
  const shape = [1, 1, tokens, cfg.rotaryDim / 2];
  const spec = ropeSpec(cfg);
  return {
    cos: input({ name: "rope_cos", dtype: dt, shape, role: { kind: "rope", part: "cos", ...spec } }),
    sin: input({ name: "rope_sin", dtype: dt, shape, role: { kind: "rope", part: "sin", ...spec } }),
  };
}

const KV_PARTS = ["k", "v"] as const;

/** The kv{L}_k_new / kv{L}_v_new outputs of a step (io KV): this token's rows, written by the host at `position`. */
export function kvNewOutputs(
  output: (t: IoTensor, v: MilVar) => void,
  L: number,
  a: AttentionStep,
  dt: GraphDType,
  shape: readonly number[],
): void {
  for (const part of KV_PARTS) {
    const role = { kind: "kv_new", layer: L, part, cache: `kv${L}_${part}`, writeRow: "position" } as const;
    output({ name: `kv${L}_${part}_new`, dtype: dt, shape, role }, part === "k" ? a.kNew : a.vNew);
  }
}

/**
 * The function's inputs and states, declared when it is made (`hidden`, `step`); `finish` writes
 * the KV state (mlstate), declares the outputs from what the layers produced and returns the
 * ComponentIO.
 */
export class SuperblockIO {
  readonly hidden: MilVar;
  readonly step: StepInputs;
  readonly produced: StepOutputs = { gdn: new Map(), attention: new Map() };
  private readonly b: MilBuilder;
  private readonly o: ResolvedOptions;
  private readonly blocks: readonly SuperBlock[];
  private readonly layers: readonly number[];
  private readonly attnLayers: readonly number[];
  private readonly T: number;
  private readonly shapes: { conv: number[]; rec: number[]; kvNew: number[] };
  private readonly prefill?: PrefillShape;
  private readonly ins: IoTensor[] = [];
  private readonly outs: IoTensor[] = [];
  private readonly states: IoTensor[] = [];
  /** The verify function: each GDN layer's starting state (what it returns as gdn{L}_*_out). */
  private readonly selected = new Map<number, GdnStateIn>();
  /** Rows of the verify function (k + 1); 0 in every other function. */
  private readonly verifyRows: number;
  /** mlstate: the state, its one read, and the bounds of this step's one write. */
  private readonly kvState?: { state: MilVar; read: MilVar; begin: MilVar; end: MilVar };

  constructor(
    b: MilBuilder,
    cfg: Qwen35Config,
    blocks: readonly SuperBlock[],
    o: ResolvedOptions,
    prefill?: PrefillShape,
  ) {
    this.b = b;
    this.o = o;
    this.blocks = blocks;
    this.prefill = prefill;
    const dt = o.dtype;
    const layers = blocks.flatMap((sb) => [...sb.layers]);
    this.layers = layers;
    this.attnLayers = layers.filter((l) => cfg.layerTypes[l] === "full_attention");
    const T = prefill?.tokens ?? 1;
    this.T = T;
    const K1 = cfg.linearConvKernelDim - 1;
    const { numKeyValueHeads: Hkv, headDim: hd } = cfg;
    this.shapes = {
      conv: [1, cfg.convDim, K1],
      rec: [1, cfg.linearNumValueHeads, cfg.linearKeyHeadDim, cfg.linearValueHeadDim],
      kvNew: [1, Hkv, T, hd],
    };
    const input = (t: IoTensor) => this.input(t);

    this.hidden = input({
      name: "hidden",
      dtype: dt,
      shape: [1, cfg.hiddenSize, 1, T],
      role: { kind: "hidden_in" },
    });
    const rope = ropeInputs(input, cfg, dt, T);
    const keys = o.ctx + T;
    const mask = input({
      name: "mask",
      dtype: dt,
      shape: [1, 1, T, keys],
      role: { kind: "mask", rule: prefill ? "prefill" : "io", keys, maskValue: MASK_NEG },
    });
    const chunk: GdnChunkInputs | undefined = prefill && {
      valid: input({ name: "valid", dtype: dt, shape: [1, 1, T, 1], role: { kind: "valid" } }),
      convPick: prefill.verify
        ? undefined
        : input({ name: "conv_pick", dtype: dt, shape: [1, T + K1, K1], role: { kind: "conv_pick" } }),
      form: prefill.verify ? "scan" : prefill.gdnForm,
      wyChunk: prefill.wyChunk,
      rowStates: prefill.verify,
    };
    // the verify function starts from the state `select` picks (the kept one, or a row of the last
    // verify), so that verify after verify commits the accepted rows without a copy; decode and
    // prefill are a plain chain's (the host copies the accepted row into the kept state before them)
    const V = prefill?.verify ? T : 0;
    this.verifyRows = V;
    const select =
      V > 0
        ? input({ name: "select", dtype: dt, shape: [V + 1, 1, 1, 1], role: { kind: "row_select" } })
        : undefined;
    const gdn = this.declareGdnStates(cfg, select);
    if (o.state === "mlstate") this.kvState = this.declareKvState(cfg);
    const kv = this.declareKvCaches(cfg);
    this.step = {
      rope,
      mask,
      gdn,
      kv,
      attention: o.attention,
      mlpMaxChannels: o.mlpMaxChannels,
      chunk,
    };
  }

  /**
   * Each GDN layer's conv window and recurrent state, in and out of the step; with `select` (the
   * verify function) also the last verify's per-row states, and the state the step starts from is
   * the one `select` picks (one-hot: products by 0 and 1 and a sum of zeros are exact in fp16).
   */
  private declareGdnStates(cfg: Qwen35Config, select?: MilVar): Map<number, GdnStateIn> {
    const dt = this.o.dtype;
    const gdn = new Map<number, GdnStateIn>();
    for (const L of this.layers.filter((l) => cfg.layerTypes[l] === "linear_attention")) {
      const conv = this.input({
        name: `gdn${L}_conv`,
        dtype: dt,
        shape: this.shapes.conv,
        role: { kind: "gdn_conv_in", layer: L },
      });
      const rec = this.input({
        name: `gdn${L}_rec`,
        dtype: dt,
        shape: this.shapes.rec,
        role: { kind: "gdn_rec_in", layer: L, scale: GDN_V_SCALE },
      });
      if (!select) {
        gdn.set(L, { conv, rec });
        continue;
      }
      const rows = (part: "conv" | "rec", kept: MilVar) => {
        const V = this.verifyRows;
        const shape = [V, ...kept.shape.slice(1)];
        const name = `gdn${L}_${part}_rows`;
        const r = this.input({ name, dtype: dt, shape, role: { kind: "gdn_rows_in", layer: L, part } });
        const stack = this.b.concat({ values: [kept, r], axis: 0, name: `${name}_stack` }); // [T + 1, …]
        const pick =
          kept.shape.length === 4
            ? select
            : this.b.reshape({ x: select, shape: [V + 1, 1, 1], name: `${name}_select` });
        const picked = this.b.mul({ x: stack, y: pick, name: `${name}_picked` });
        return this.b.reduceSum({ x: picked, axes: [0], keepDims: true, name: `gdn${L}_${part}_start` });
      };
      const start = { conv: rows("conv", conv), rec: rows("rec", rec) };
      this.selected.set(L, start);
      gdn.set(L, start);
    }
    return gdn;
  }

  /** Each attention layer's cached K and V: the host's caches (io) or its rows of the KV state (mlstate). */
  private declareKvCaches(cfg: Qwen35Config): Map<number, KvCache> {
    const { b, o } = this;
    const dt = o.dtype;
    const { numKeyValueHeads: Hkv, headDim: hd } = cfg;
    const kv = new Map<number, KvCache>();
    if (!this.kvState) {
      for (const L of this.attnLayers) {
        const [k, v] = KV_PARTS.map((part) =>
          this.input({
            name: `kv${L}_${part}`,
            dtype: dt,
            shape: [1, Hkv, o.ctx, hd],
            role: { kind: "kv_cache", layer: L, part },
          }),
        );
        kv.set(L, { k, v });
      }
      return kv;
    }
    const n = this.attnLayers.length;
    const { read } = this.kvState;
    const rowsOf = (row: number, name: string) => {
      const x = b.sliceByIndex({ x: read, begin: [row, 0, 0, 0], end: [row + 1, Hkv, o.ctx, hd], name });
      return dt === "fp16" ? x : b.cast({ x, dtype: "fp32", name: `${name}_f32` }); // fp32 graphs
    };
    for (const [i, L] of this.attnLayers.entries())
      kv.set(L, { k: rowsOf(i, `kv${L}_k_rows`), v: rowsOf(n + i, `kv${L}_v_rows`) });
    return kv;
  }

  private input(t: IoTensor): MilVar {
    this.ins.push(t);
    return this.b.input(t.name, tensorType(t.dtype, t.shape));
  }

  private output(t: IoTensor, v: MilVar): void {
    this.outs.push(t);
    this.b.output(t.name, v);
  }

  /**
   * mlstate: one fp16 state `kv` [2n, Hkv, kvRows, hd] (layer i's K at row i, V at n + i), the
   * bounds of the step's write (host inputs), and the state's one read.
   */
  private declareKvState(cfg: Qwen35Config): NonNullable<SuperblockIO["kvState"]> {
    const b = this.b;
    const { numKeyValueHeads: Hkv, headDim: hd } = cfg;
    const n = this.attnLayers.length;
    const rows = this.attnLayers.flatMap((L, i) => [
      { row: i, layer: L, part: "k" as const },
      { row: n + i, layer: L, part: "v" as const },
    ]);
    const shape = [2 * n, Hkv, this.o.kvRows, hd];
    this.states.push({
      name: "kv",
      dtype: "fp16",
      shape,
      role: { kind: "kv_state", rows: rows.sort((p, q) => p.row - q.row) },
    });
    const state = b.state("kv", tensorType("fp16", shape)); // Core ML states are fp16 in every dtype
    // the write's bounds [0, 0, row, 0] .. [2n, Hkv, row + T, hd], from the host
    const rowsShape = [2 * n, Hkv, this.T, hd];
    const [begin, end] = (["begin", "end"] as const).map((bound) =>
      this.input({
        name: `kv_write_${bound}`,
        dtype: "int32",
        shape: [4],
        role: { kind: "kv_write", bound, rows: rowsShape },
      }),
    );
    const read = b.readState({ input: state, name: "kv_read" }); // [2n, Hkv, kvRows, hd]
    return { state, read, begin, end };
  }

  /** The step's end: the KV state write (mlstate), then every output; returns the ComponentIO. */
  finish(h: MilVar): ComponentIO {
    const { b, o, T, produced } = this;
    const dt = o.dtype;
    if (this.kvState) {
      // every layer's new k rows, then every v rows, in state-row order: [2n, Hkv, T, hd]
      const { state, read, begin, end } = this.kvState;
      const steps = this.attnLayers.map((L) => produced.attention.get(L) as AttentionStep);
      let update = b.concat({
        values: [...steps.map((s) => s.kNew), ...steps.map((s) => s.vNew)],
        axis: 0,
        name: "kv_new_rows",
      });
      if (update.dtype !== "fp16") update = b.cast({ x: update, dtype: "fp16", name: "kv_new_rows_f16" });
      const written = b.sliceUpdate({ x: read, update, begin, end, name: "kv_write" });
      b.writeState({ input: state, data: written });
    }
    const D = h.shape[1];
    this.output({ name: "hidden_out", dtype: dt, shape: [1, D, 1, T], role: { kind: "hidden_out" } }, h);
    for (const L of this.layers) {
      const g0 = produced.gdn.get(L);
      const start = this.prefill?.verify ? this.selected.get(L) : undefined;
      // verify: the kept state stays the step's start (committed only through `select`)
      const g = g0 && start ? { ...g0, conv: start.conv, rec: start.rec } : g0;
      if (g) {
        this.output(
          {
            name: `gdn${L}_conv_out`,
            dtype: dt,
            shape: this.shapes.conv,
            role: { kind: "gdn_conv_out", layer: L, next: `gdn${L}_conv` },
          },
          g.conv,
        );
        this.output(
          {
            name: `gdn${L}_rec_out`,
            dtype: dt,
            shape: this.shapes.rec,
            role: { kind: "gdn_rec_out", layer: L, scale: GDN_V_SCALE, next: `gdn${L}_rec` },
          },
          g.rec,
        );
        for (const part of g.rows ? (["conv", "rec"] as const) : []) {
          const v = g.rows?.[part] as MilVar;
          const name = `gdn${L}_${part}_rows`;
          const role = { kind: "gdn_rows_out", layer: L, part, next: name } as const;
          this.output({ name: `${name}_out`, dtype: dt, shape: v.shape, role }, v);
        }
      }
      const a = produced.attention.get(L);
      if (a && o.state === "io") kvNewOutputs((t, v) => this.output(t, v), L, a, dt, this.shapes.kvNew);
    }
    return {
      component: "superblocks",
      dtype: dt,
      ctx: o.ctx,
      state: o.state,
      layers: [...this.layers],
      superBlocks: this.blocks.map((sb) => sb.index),
      inputs: this.ins,
      outputs: this.outs,
      states: this.states,
      notes: this.notes(),
    };
  }

  private notes(): string[] {
    const { T, o, prefill } = this;
    const K1 = this.shapes.conv[2];
    const notes = [
      `gdn{L}_rec holds ${GDN_V_SCALE}·S (v is scaled by ${GDN_V_SCALE} for fp16 safety); zero-initialise it at sequence start like the reference state`,
      prefill
        ? `mask [T, ctx + T]: row i is 0 for cache rows < position and for chunk keys ≤ i, ${MASK_NEG} elsewhere`
        : `mask: 0 for key rows < position and for the last key (this token), ${MASK_NEG} elsewhere`,
    ];
    if (prefill?.verify)
      notes.push(
        `verify: ${T} rows (the token after the last output, then up to ${T - 1} drafts) at positions [position, position + ${T}), masked like a prefill chunk (valid = 1 for the real rows); the GDN layers start from the state select picks (one-hot [${T + 1}]: 0 the kept gdn{L}_conv / gdn{L}_rec, j + 1 row j of gdn{L}_*_rows) and return it as gdn{L}_*_out, and every row's states as gdn{L}_*_rows_out; accepting n rows = select n at the next verify, or (before a decode or prefill call, which have no select) copying row n − 1 of gdn{L}_*_rows into gdn{L}_conv / gdn{L}_rec; all ${T} KV rows are written (rows past the accepted ones are masked, then overwritten)`,
      );
    else if (prefill)
      notes.push(
        `prefill: ${T} tokens at positions [position, position + ${T}) in one call; a shorter chunk of n tokens feeds copies of its last hidden row after them (never zeros: an fp16 norm of a zero row is NaN on a datapath that flushes subnormals), valid = 1 for the first n rows and 0 after, conv_pick picks window columns n … n + ${K1 - 1}; all ${T} KV rows are produced (rows past n are masked until decode overwrites them; the host may keep only n), so position + n ≤ ctx`,
      );
    if (o.state === "mlstate" && o.dtype === "fp32")
      notes.push("the KV state is fp16 (Core ML states are fp16 only); this fp32 graph casts around it");
    if (o.state === "mlstate")
      notes.push(
        `the KV state has ${o.kvRows} rows, shared by every bucket's functions; this one reads the first ${o.ctx} and writes ${T} at the host's kv_write bounds`,
      );
    return notes;
  }
}

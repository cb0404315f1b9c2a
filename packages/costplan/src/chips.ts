/**
 * Chip profiles: the numbers the roofline runs on, each tagged with where it comes from.
 *
 *   measured  — someone timed it on that chip (the source says who and how)
 *   published — Apple's own figure (newsroom press release / tech specs page), a peak
 *   derived   — arithmetic on published figures (the comment gives the arithmetic)
 *   assumed   — no public figure; a stated guess that only matters where it is used
 *   fitted    — fitted to measurements by bench/calibrate.ts (calibration.ts says to what)
 *
 * What matters for decode is the ANE's attainable weight-streaming bandwidth (one token reads
 * every weight once), which anemll-bench measured per chip (shared/reference/ane-toolchains.md §2.4,
 * `Anemll/anemll-bench : Results.MD`, a ~1 GB `llama_lm_head` streamed through the ANE). Apple's
 * unified-memory bandwidth is NOT what the ANE gets: before M3 Max the ANE stays near 55–64 GB/s
 * whatever the memory bus ("ANE bandwidth does not scale with Pro/Max/Ultra memory buses before
 * M3 Max", same table).
 */

export type FigureKind = "measured" | "published" | "derived" | "assumed" | "fitted";

export interface Figure {
  readonly value: number;
  readonly kind: FigureKind;
  readonly source: string;
}

export interface ChipProfile {
  readonly id: ChipId;
  readonly name: string;
  /** Apple's Neural Engine figure in trillions of operations per second (peak). */
  readonly aneTops: Figure;
  /** fp16 operations per second the ANE can do, in TFLOPS (a multiply-add counts 2). */
  readonly aneFp16Tflops: Figure;
  /** ANE weight-streaming bandwidth, GB/s (10^9 bytes/s): the roofline's memory term on the ANE. */
  readonly aneGBps: Figure;
  /** Unified-memory bandwidth, GB/s (peak). */
  readonly memoryGBps: Figure;
  /** CPU fallback: attainable GFLOPS and GB/s. */
  readonly cpuGflops: Figure;
  readonly cpuGBps: Figure;
  /** GPU fallback (only when compute units include the GPU): TFLOPS (fp16) and GB/s. */
  readonly gpuTflops: Figure;
  readonly gpuGBps: Figure;
}

export type ChipId =
  | "m1"
  | "m1-pro"
  | "m1-max"
  | "m2"
  | "m2-pro"
  | "m2-max"
  | "m3"
  | "m3-pro"
  | "m3-max"
  | "m4"
  | "m4-pro"
  | "m4-max"
  | "m5"
  | "m5-pro"
  | "m5-max";

// --- sources ------------------------------------------------------------------------------------

const BENCH = "Anemll/anemll-bench Results.MD (ane-toolchains.md §2.4)";
const NEWS_M1 = "Apple Newsroom 2020-11-10 'Apple unleashes M1' (16-core Neural Engine, 11 TOPS)";
const NEWS_M1PM = "Apple Newsroom 2021-10-18 'Introducing M1 Pro and M1 Max' (11 TOPS; 200 / 400 GB/s)";
const NEWS_M2 = "Apple Newsroom 2022-06-06 'Apple unveils M2' (15.8 TOPS, 100 GB/s, GPU 3.6 TFLOPS)";
const NEWS_M2PM = "Apple Newsroom 2023-01-17 'Apple unveils M2 Pro and M2 Max' (15.8 TOPS; 200 / 400 GB/s)";
const NEWS_M3 =
  "Apple Newsroom 2023-10-30 'Apple unveils M3, M3 Pro, and M3 Max' (18 TOPS; 100 / 150 / 400 GB/s)";
const NEWS_M4 = "Apple Newsroom 2024-05-07 'Apple introduces M4 chip' (38 TOPS, 120 GB/s)";
const NEWS_M4PM = "Apple Newsroom 2024-10-30 'Apple introduces M4 Pro and M4 Max' (38 TOPS; 273 / 546 GB/s)";
const NEWS_M5 = "Apple Newsroom 2025-10-15 'Apple unleashes M5' (16-core Neural Engine, 153 GB/s)";

const pub = (value: number, source: string): Figure => ({ value, kind: "published", source });
const meas = (value: number, source: string): Figure => ({ value, kind: "measured", source });
const derived = (value: number, source: string): Figure => ({ value, kind: "derived", source });
const assumed = (value: number, source: string): Figure => ({ value, kind: "assumed", source });

/** fp16 equals Apple's TOPS up to M3 (Apple quoted fp16 there; A17 Pro/M4 onward quote int8). */
function fp16FromTops(tops: Figure, int8Quoted: boolean): Figure {
  return int8Quoted
    ? assumed(
        tops.value / 2,
        "assumed: from A17 Pro/M4 on Apple's TOPS count int8 operations; fp16 taken as half of it",
      )
    : derived(tops.value, "derived: Apple's TOPS (fp16 for M1–M3) as fp16 FLOPS");
}

/** CPU fallback figures: nobody publishes an attainable per-op figure; these only weigh fallbacks. */
function cpuFigures(memory: Figure): { cpuGflops: Figure; cpuGBps: Figure } {
  return {
    cpuGflops: assumed(200, "assumed: ~200 GFLOPS for small fp16/fp32 ops through BNNS on the P-cores"),
    cpuGBps: assumed(
      Math.min(memory.value * 0.5, 120),
      "assumed: half of unified-memory bandwidth, at most 120 GB/s (one CPU cluster)",
    ),
  };
}

function gpuFigures(tflops: Figure, memory: Figure): { gpuTflops: Figure; gpuGBps: Figure } {
  return {
    gpuTflops: tflops,
    gpuGBps: assumed(memory.value * 0.8, "assumed: 80% of unified-memory bandwidth"),
  };
}

/** Apple stopped publishing GPU TFLOPS with M3; scale M2's 3.6 TFLOPS / 10 cores by core count. */
function gpuByCores(cores: number): Figure {
  return assumed(
    Math.round(cores * 0.36 * 10) / 10,
    `assumed: ${cores} GPU cores × 0.36 TFLOPS/core (M2: 3.6 TFLOPS over 10 cores)`,
  );
}

interface ChipSpec {
  id: ChipId;
  name: string;
  tops: Figure;
  int8Quoted: boolean;
  ane: Figure;
  memory: Figure;
  gpu: Figure;
}

function chip(s: ChipSpec): ChipProfile {
  return {
    id: s.id,
    name: s.name,
    aneTops: s.tops,
    aneFp16Tflops: fp16FromTops(s.tops, s.int8Quoted),
    aneGBps: s.ane,
    memoryGBps: s.memory,
    ...cpuFigures(s.memory),
    ...gpuFigures(s.gpu, s.memory),
  };
}

// ANE bandwidth rows of the anemll-bench table: "M1 Pro / Max / Ultra ~55", "M1, M2 family, M3, M4
// (base) ~60–64" (we take 62, the middle), "M3 Max / M4 Pro / M4 Max ~119–126" (122), "M5 70",
// "M5 Max 148 (7.08 ms per 1050 MB)".
const ANE_BASE = meas(62, `${BENCH}: 'M1, M2 family, M3, M4 (base) ~60–64 GB/s' (middle of the range)`);
const ANE_M1PM = meas(55, `${BENCH}: 'M1 Pro / Max / Ultra ~55 GB/s'`);
const ANE_BIG = meas(122, `${BENCH}: 'M3 Max / M4 Pro / M4 Max ~119–126 GB/s' (middle of the range)`);

export const CHIPS: Readonly<Record<ChipId, ChipProfile>> = {
  m1: chip({
    id: "m1",
    name: "Apple M1",
    tops: pub(11, NEWS_M1),
    int8Quoted: false,
    ane: ANE_BASE,
    memory: derived(68.25, "derived: LPDDR4X-4266 × 128-bit bus (M1 Pro's 200 GB/s is quoted as ~3× M1)"),
    gpu: pub(2.6, NEWS_M1),
  }),
  "m1-pro": chip({
    id: "m1-pro",
    name: "Apple M1 Pro",
    tops: pub(11, NEWS_M1PM),
    int8Quoted: false,
    ane: ANE_M1PM,
    memory: pub(200, NEWS_M1PM),
    gpu: pub(5.2, NEWS_M1PM),
  }),
  "m1-max": chip({
    id: "m1-max",
    name: "Apple M1 Max",
    tops: pub(11, NEWS_M1PM),
    int8Quoted: false,
    ane: ANE_M1PM,
    memory: pub(400, NEWS_M1PM),
    gpu: pub(10.4, NEWS_M1PM),
  }),
  m2: chip({
    id: "m2",
    name: "Apple M2",
    tops: pub(15.8, NEWS_M2),
    int8Quoted: false,
    ane: ANE_BASE,
    memory: pub(100, NEWS_M2),
    gpu: pub(3.6, NEWS_M2),
  }),
  "m2-pro": chip({
    id: "m2-pro",
    name: "Apple M2 Pro",
    tops: pub(15.8, NEWS_M2PM),
    int8Quoted: false,
    ane: ANE_BASE,
    memory: pub(200, NEWS_M2PM),
    gpu: pub(6.8, `${NEWS_M2PM} (19-core GPU 6.8 TFLOPS)`),
  }),
  "m2-max": chip({
    id: "m2-max",
    name: "Apple M2 Max",
    tops: pub(15.8, NEWS_M2PM),
    int8Quoted: false,
    ane: ANE_BASE,
    memory: pub(400, NEWS_M2PM),
    gpu: pub(13.6, `${NEWS_M2PM} (38-core GPU 13.6 TFLOPS)`),
  }),
  m3: chip({
    id: "m3",
    name: "Apple M3",
    tops: pub(18, NEWS_M3),
    int8Quoted: false,
    ane: ANE_BASE,
    memory: pub(100, NEWS_M3),
    gpu: gpuByCores(10),
  }),
  "m3-pro": chip({
    id: "m3-pro",
    name: "Apple M3 Pro",
    tops: pub(18, NEWS_M3),
    int8Quoted: false,
    ane: assumed(62, `assumed: not in ${BENCH}; taken as M3 (base), as its ANE predates the M3 Max jump`),
    memory: pub(150, NEWS_M3),
    gpu: gpuByCores(18),
  }),
  "m3-max": chip({
    id: "m3-max",
    name: "Apple M3 Max",
    tops: pub(18, NEWS_M3),
    int8Quoted: false,
    ane: ANE_BIG,
    memory: pub(400, `${NEWS_M3} (16-core CPU / 40-core GPU part; the 14/30 part has 300 GB/s)`),
    gpu: gpuByCores(40),
  }),
  m4: chip({
    id: "m4",
    name: "Apple M4",
    tops: pub(38, NEWS_M4),
    int8Quoted: true,
    ane: ANE_BASE,
    memory: pub(120, NEWS_M4),
    gpu: gpuByCores(10),
  }),
  "m4-pro": chip({
    id: "m4-pro",
    name: "Apple M4 Pro",
    tops: pub(38, NEWS_M4PM),
    int8Quoted: true,
    ane: ANE_BIG,
    memory: pub(273, NEWS_M4PM),
    gpu: gpuByCores(20),
  }),
  "m4-max": chip({
    id: "m4-max",
    name: "Apple M4 Max",
    tops: pub(38, NEWS_M4PM),
    int8Quoted: true,
    ane: ANE_BIG,
    memory: pub(546, `${NEWS_M4PM} (16-core CPU part; the 14-core part has 410 GB/s)`),
    gpu: gpuByCores(40),
  }),
  m5: chip({
    id: "m5",
    name: "Apple M5",
    tops: assumed(38, `assumed: ${NEWS_M5} gives no Neural Engine TOPS; M4's 38 taken`),
    int8Quoted: true,
    ane: meas(70, `${BENCH}: 'M5 70 GB/s'`),
    memory: pub(153, NEWS_M5),
    gpu: gpuByCores(10),
  }),
  "m5-pro": chip({
    id: "m5-pro",
    name: "Apple M5 Pro",
    tops: assumed(38, "assumed: no Neural Engine TOPS figure found; M4's 38 taken"),
    int8Quoted: true,
    ane: assumed(148, `assumed: not in ${BENCH}; taken as M5 Max (M4 Pro and M4 Max measured alike)`),
    memory: assumed(307, "assumed: M5's LPDDR5X-9600 on M4 Pro's 256-bit bus (9600 MT/s × 32 B)"),
    gpu: gpuByCores(20),
  }),
  "m5-max": chip({
    id: "m5-max",
    name: "Apple M5 Max",
    tops: assumed(38, "assumed: no Neural Engine TOPS figure found; M4's 38 taken"),
    int8Quoted: true,
    ane: meas(148, `${BENCH}: 'M5 Max 148 GB/s (7.08 ms per 1050 MB)'`),
    memory: assumed(614, "assumed: M5's LPDDR5X-9600 on M4 Max's 512-bit bus (9600 MT/s × 64 B)"),
    gpu: gpuByCores(40),
  }),
};

export const CHIP_IDS = Object.keys(CHIPS) as ChipId[];

/**
 * Per-prediction overhead and boundary costs. These are properties of the host harness and
 * Core ML rather than of the chip; `calibration.ts` fits the first two against measurements.
 */
export interface RuntimeFigures {
  /** Host → Core ML → ANE and back, per `predict()` call, ms. */
  readonly dispatchMs: Figure;
  /** Fraction of `aneGBps` that real graphs attain (the measured figure is one ideal lm_head). */
  readonly bandwidthFraction: Figure;
  /** Cost of one switch between the ANE and another device inside a prediction, ms. */
  readonly switchMs: Figure;
  /**
   * Fixed cost per ANE kernel op (op-table's `kernel`: conv, linear, matmul, SDPA), ms. Decode
   * measurements cannot separate it from the bandwidth fraction (op count and bytes grow together),
   * so projections come as a band over ANE_OP_MS_RANGE unless a calibration pins it.
   */
  readonly aneOpMs: Figure;
  /**
   * Time to pass a prediction's inputs and outputs (every feature but states) between the host
   * and the device, ms per MB (1e6 bytes): Core ML copies each one, unless the runtime hands it
   * IOSurface-backed buffers.
   */
  readonly ioMsPerMB: Figure;
  /**
   * The ctx term: ms per MB of KV cache the attention layers of a prediction read, counting at
   * most `kvKneeRows` rows per layer (the reference study's sweep grows from ctx 256 to 512 and is
   * flat after). Absent: 0.
   */
  readonly kvMsPerMB?: Figure;
  /** KV rows per layer beyond which the ctx term stops growing. Absent: DEFAULT_RUNTIME's. */
  readonly kvKneeRows?: Figure;
}

/**
 * The published range of the per-op ANE cost, ms: what makes costplan's chunked-prefill projection
 * meet what the ANE ports measured for batched prefill (ANEMLL batch-64 prefill 335 tok/s on 1.5B;
 * a Qwen3.5-4B port 96 tok/s batched; CoreML-LLM prefill_b8 7.77×) — ane-graph-review-2 §3:
 * "publish projections as a band with a 20–50 µs per-op term" until a Mac measurement fits it.
 */
export const ANE_OP_MS_RANGE = {
  low: 0.02,
  high: 0.05,
  source:
    "published range 20–50 µs per ANE op (ane-graph-review-2 §3, from the ports' batched-prefill measurements: ANEMLL 335 tok/s on 1.5B, a Qwen3.5-4B port 96 tok/s)",
} as const;

export const DEFAULT_RUNTIME: RuntimeFigures = {
  dispatchMs: meas(
    1.0,
    "shipstuff/flash-moe ane_bench/README.md: 'Dispatch overhead ~1 ms per prediction from Obj-C' (M4 Pro; ane-toolchains.md §4.3)",
  ),
  bandwidthFraction: assumed(1.0, "assumed: graphs stream weights as fast as anemll-bench's lm_head"),
  switchMs: assumed(
    0.2,
    "assumed: no public measurement (anemll-profile's 300 ms per boundary is a ranking weight, not a time)",
  ),
  aneOpMs: assumed(0, "assumed: no per-op ANE overhead (the physics-only model)"),
  ioMsPerMB: assumed(0, "assumed: inputs and outputs cost nothing to pass (the physics-only model)"),
  kvMsPerMB: assumed(0, "assumed: attention over the KV cache costs only its bytes (the physics-only model)"),
  kvKneeRows: assumed(
    512,
    "reference study's context sweep: 2.41 ms per super-block at ctx 256, 3.19 at 1024, 'little additional gain at 512 and above' (ane-toolchains.md §4.3)",
  ),
};

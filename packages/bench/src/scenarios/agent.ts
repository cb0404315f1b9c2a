/**
 * agent: a scripted tool-calling conversation through `anemll-qwen35 serve` with the `openai`
 * client — a system prompt, 8 tool schemas, then turns that each add an assistant tool call and a
 * tool result of a fixed token count — as an agent would drive a small model in the background.
 *
 * Per backend (the chain on the reference interpreter, MLX) the built CLI is spawned as a server,
 * each turn is one streamed chat completion: TTFT (request → first streamed delta), prompt and
 * cached tokens (the server's usage, `prompt_tokens_details.cached_tokens`: restored from its
 * prompt cache), decode tok/s ((completion tokens − 1) / time after the first delta), and the
 * server's peak RSS (VmHWM on Linux, else the largest `ps` RSS sampled). The turns are scripted:
 * what the model answers is ignored (random-weight models), the next turn appends the same
 * assistant tool call and tool result whatever it said, so only the token counts matter.
 *
 * Beside them, costplan's projection of the same conversation (the token counts measured on the
 * chain) on the ANE of an M4 Pro for Qwen3.5-0.8B and 9B shapes (synthetic checkpoints converted
 * with the scenario's ctx; 9B as one super-block, × 8): per turn, TTFT = ⌈new tokens / T⌉ prefill
 * calls of each super-block package + one lm_head call, decode ms per token = one decode step of
 * the chain — each as a band over the per-op ANE cost (costplan's runtimeBand).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Calibration, callEstimate, costplan, readCalibration } from "@anemll-qwen35/costplan";
import { loadTokenizer } from "@anemll-qwen35/generate";
import OpenAI from "openai";
import { Agent, fetch as undiciFetch } from "undici";
import { mlxStatus } from "../backends.js";
import type { ChartSpec } from "../charts.js";
import { BenchOptionError } from "../errors.js";
import { conversionOf, ensureChain, modelInfo } from "../models.js";
import { lineChart } from "../report.js";
import type { AgentParams, AgentScript } from "../scale.js";
import type { Scenario, ScenarioContext } from "../scenario.js";
import type { BackendId, Metric, Run, Skip } from "../schema.js";
import { metric } from "../stats.js";

/** The 8 tools of the scripted agent (OpenAI function tools). */
export const AGENT_TOOLS = [
  ["read_file", "Read a text file", { path: "string" }],
  ["write_file", "Write a text file", { path: "string", content: "string" }],
  ["list_dir", "List a folder", { path: "string" }],
  ["search", "Search the files for a pattern", { pattern: "string", path: "string" }],
  ["run_tests", "Run the test suite", { filter: "string" }],
  ["http_get", "Fetch a URL", { url: "string" }],
  ["get_weather", "Weather for a city", { city: "string" }],
  ["send_email", "Send an email", { to: "string", subject: "string", body: "string" }],
].map(([name, description, props]) => ({
  type: "function" as const,
  function: {
    name: name as string,
    description: description as string,
    parameters: {
      type: "object",
      properties: Object.fromEntries(Object.entries(props).map(([k, t]) => [k, { type: t }])),
      required: Object.keys(props as object),
    },
  },
}));

const SYSTEM =
  "You are a background coding agent. Use the tools to inspect and change the repository, one call at a time. " +
  "Answer with a tool call while work remains; when done, reply with a one-line summary.";

/** A tool result of at least `tokens` tokens under `encode` (scripted log lines). */
export function toolResult(turn: number, tokens: number, encode: (s: string) => number[]): string {
  const lines: string[] = [];
  let text = "";
  for (let i = 0; encode(text).length < tokens; i++) {
    lines.push(`line ${i}: test ${turn}.${i} passed in ${(i * 7) % 13} ms, file src/mod${i % 9}.ts`);
    text = lines.join("\n");
  }
  return text;
}

/** The CLI the scenario spawns: $ANEMLL_QWEN35_CLI, else the repository's apps/cli/dist/cli.js. */
export function cliPath(): string | undefined {
  if (process.env.ANEMLL_QWEN35_CLI) return process.env.ANEMLL_QWEN35_CLI;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const p = join(dir, "apps", "cli", "dist", "cli.js");
    if (existsSync(p)) return p;
    dir = dirname(dir);
  }
  return undefined;
}

interface Served {
  readonly url: string;
  readonly child: ChildProcess;
  peakRss(): number;
  stop(): Promise<void>;
}

function rssOf(pid: number): number | undefined {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Spawns `cli serve …args` on a free port and waits for its URL. */
async function serve(cli: string, args: readonly string[], log: (l: string) => void): Promise<Served> {
  const child = spawn(process.execPath, [cli, "serve", ...args, "--port", "0", "--model-name", "agent"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let peak = 0;
  let stderr = "";
  const sample = () => {
    if (child.pid === undefined) return;
    const hwm = rssOf(child.pid);
    if (hwm !== undefined) peak = Math.max(peak, hwm);
    else {
      const ps = spawn("ps", ["-o", "rss=", "-p", String(child.pid)]);
      let out = "";
      ps.stdout.on("data", (d) => {
        out += d;
      });
      ps.on("close", () => {
        const kb = Number(out.trim());
        if (Number.isFinite(kb)) peak = Math.max(peak, kb * 1024);
      });
    }
  };
  const timer = setInterval(sample, 250);
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (d) => {
      out += d;
      const m = /serving the OpenAI API at (\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.stderr?.on("data", (d) => {
      stderr += d;
    });
    child.on("exit", (code) =>
      reject(new BenchOptionError("agent", `serve exited (${code}): ${stderr.slice(-800)}`)),
    );
  });
  log(`  serving at ${url}`);
  return {
    url,
    child,
    peakRss: () => {
      sample();
      return peak;
    },
    async stop() {
      clearInterval(timer);
      if (child.exitCode !== null) return;
      await new Promise<void>((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
      });
    },
  };
}

export interface TurnMeasure {
  readonly ttftMs: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  readonly decodeTokS: number | undefined;
}

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** Runs the script against a served model; one TurnMeasure per turn. */
async function converse(
  url: string,
  model: string,
  script: AgentScript,
  ctx: number,
  encode: (s: string) => number[],
  log: (l: string) => void,
): Promise<{ turns: TurnMeasure[]; toolResultTokens: number }> {
  // a first turn on the interpreter can take longer than fetch's default 300 s to its headers
  const dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
  const client = new OpenAI({
    baseURL: url,
    apiKey: "none",
    maxRetries: 0,
    timeout: 3_600_000,
    fetch: undiciFetch as unknown as typeof fetch,
    fetchOptions: { dispatcher } as never,
  });
  const tools = AGENT_TOOLS.slice(0, script.tools);
  const messages: Message[] = [
    { role: "system", content: SYSTEM },
    { role: "user", content: "The tests fail after the last change. Find out why and fix it." },
  ];
  const out: TurnMeasure[] = [];
  let resultTokens = script.toolResultTokens;
  for (let turn = 0; turn < script.turns; turn++) {
    const t0 = performance.now();
    let first: number | undefined;
    let usage: OpenAI.CompletionUsage | undefined;
    const stream = await client.chat.completions.create({
      model,
      messages,
      tools,
      max_tokens: script.maxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta;
      // content, tool-call or reasoning deltas alike: the first token the server streamed
      if (
        first === undefined &&
        d &&
        (d.content || d.tool_calls?.length || (d as { reasoning_content?: string }).reasoning_content)
      )
        first = performance.now();
      if (chunk.usage) usage = chunk.usage;
    }
    const end = performance.now();
    if (!usage)
      throw new BenchOptionError("agent", "the server sent no usage (stream_options.include_usage)");
    const ttft = (first ?? end) - t0;
    const n = usage.completion_tokens;
    const m: TurnMeasure = {
      ttftMs: ttft,
      promptTokens: usage.prompt_tokens,
      cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
      completionTokens: n,
      decodeTokS: first !== undefined && n > 1 && end > first ? ((n - 1) * 1000) / (end - first) : undefined,
    };
    log(
      `  turn ${turn + 1}: prompt ${m.promptTokens} (cached ${m.cachedTokens}), TTFT ${(m.ttftMs / 1000).toFixed(2)} s, ${n} tokens${m.decodeTokS ? ` at ${m.decodeTokS.toFixed(1)} tok/s` : ""}`,
    );
    out.push(m);
    // scripted: the same tool call and result whatever the model said
    const id = `call_${turn}`;
    messages.push({
      role: "assistant",
      content: null,
      tool_calls: [
        {
          id,
          type: "function",
          function: { name: "run_tests", arguments: JSON.stringify({ filter: `t${turn}` }) },
        },
      ],
    });
    if (turn === 0) {
      // a model whose ctx cannot hold the whole script gets shorter tool results (the caller notes it)
      const perTurn = 64 + script.maxTokens; // the tool call, the template's role markers, the reply
      const room =
        Math.floor((ctx - m.promptTokens - script.maxTokens) / Math.max(1, script.turns - 1)) - perTurn;
      resultTokens = Math.max(8, Math.min(resultTokens, room));
    }
    messages.push({ role: "tool", tool_call_id: id, content: toolResult(turn, resultTokens, encode) });
  }
  return { turns: out, toolResultTokens: resultTokens };
}

function turnMetrics(turns: readonly TurnMeasure[], peakRss: number): Metric[] {
  const tok = turns.flatMap((t) => (t.decodeTokS !== undefined ? [t.decodeTokS] : []));
  return [
    metric(
      "ttft_ms",
      "ms",
      turns.map((t) => t.ttftMs),
      "per turn, in order: request → first streamed delta",
    ),
    metric(
      "prompt_tokens",
      "tokens",
      turns.map((t) => t.promptTokens),
      "per turn (the server's usage)",
    ),
    metric(
      "cached_tokens",
      "tokens",
      turns.map((t) => t.cachedTokens),
      "per turn: restored from the prompt cache",
    ),
    metric(
      "new_tokens",
      "tokens",
      turns.map((t) => t.promptTokens - t.cachedTokens),
      "per turn: prefilled",
    ),
    metric(
      "completion_tokens",
      "tokens",
      turns.map((t) => t.completionTokens),
      "per turn",
    ),
    ...(tok.length
      ? [
          metric(
            "decode_tok_s",
            "tok/s",
            tok,
            "per turn: (completion tokens − 1) / time after the first delta",
          ),
        ]
      : []),
    metric("peak_rss_bytes", "bytes", [peakRss], "the server process's peak resident set"),
  ];
}

/** A model's max_position_embeddings (caps the ctx a conversion may take). */
async function maxPositions(dir: string): Promise<number> {
  const c = JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
  return c.text_config?.max_position_embeddings ?? c.max_position_embeddings ?? Number.POSITIVE_INFINITY;
}

/** costplan's per-turn projection of `turns` on the M4 Pro ANE for the chain in `dir`. */
/**
 * The full script's turns (`script.turns` tool results of `script.toolResultTokens`) from a
 * measured run: its first prompt, the per-turn overhead besides the tool result (the tool call,
 * the template's markers) and how many tokens of the previous prompt the cache did not restore.
 */
export function scriptedTurns(
  measured: readonly TurnMeasure[],
  measuredResultTokens: number,
  script: Pick<AgentScript, "turns" | "toolResultTokens">,
): { promptTokens: number; cachedTokens: number }[] {
  const n = measured.length;
  const overhead =
    n > 1 ? (measured[n - 1].promptTokens - measured[0].promptTokens) / (n - 1) - measuredResultTokens : 80;
  // tokens of the previous prompt the cache did not restore (the last one is fed again)
  const lag = n > 1 ? Math.max(0, measured[0].promptTokens - measured[1].cachedTokens) : 1;
  const out = [{ promptTokens: measured[0].promptTokens, cachedTokens: 0 }];
  for (let i = 1; i < script.turns; i++) {
    const prev = out[i - 1].promptTokens;
    out.push({
      promptTokens: Math.round(prev + script.toolResultTokens + overhead),
      cachedTokens: prev - lag,
    });
  }
  return out;
}

export async function project(
  dir: string,
  superBlocksPerPackage: number | undefined,
  turns: readonly { readonly promptTokens: number; readonly cachedTokens: number }[],
  calibration: "fitted" | Calibration,
): Promise<{ metrics: Metric[]; notes: string[] }> {
  const report = await costplan(dir, { chip: "m4-pro", native: "off", calibration });
  const manifest = JSON.parse(readFileSync(join(dir, "model.json"), "utf8")) as {
    components: { name: string; kind: string; prefill?: { function: string; tokens: number } }[];
  };
  const sbs = manifest.components.filter((c) => c.kind === "superblocks");
  const head = manifest.components.find((c) => c.kind === "lm_head");
  if (!head) throw new BenchOptionError("agent", `${dir}: no lm_head`);
  const scale = superBlocksPerPackage ?? 1; // a one-super-block stand-in of a larger model: × its count
  const sum = (parts: { estimatedMs: number; lowMs: number; highMs: number }[], k = 1) => ({
    estimatedMs: k * parts.reduce((s, p) => s + p.estimatedMs, 0),
    lowMs: k * parts.reduce((s, p) => s + p.lowMs, 0),
    highMs: k * parts.reduce((s, p) => s + p.highMs, 0),
  });
  const headCall = callEstimate(report, head.name);
  const decode = sum([
    sum(
      sbs.map((c) => callEstimate(report, c.name)),
      scale,
    ),
    headCall,
  ]);
  const T = sbs[0]?.prefill?.tokens ?? 1;
  const chunk = sum(
    sbs.map((c) => callEstimate(report, c.name, c.prefill?.function)),
    scale,
  );
  const ttft = turns.map((t) => {
    const calls = Math.ceil(Math.max(1, t.promptTokens - t.cachedTokens) / T);
    return sum([sum([chunk], calls), headCall]);
  });
  return {
    metrics: [
      metric(
        "projected_ttft_ms",
        "ms",
        ttft.map((x) => x.estimatedMs),
        "per turn: ⌈new tokens / T⌉ prefill calls + the lm_head",
      ),
      metric(
        "projected_ttft_ms_low",
        "ms",
        ttft.map((x) => x.lowMs),
        "per turn, low end of the band",
      ),
      metric(
        "projected_ttft_ms_high",
        "ms",
        ttft.map((x) => x.highMs),
        "per turn, high end of the band",
      ),
      metric("projected_decode_tok_s", "tok/s", [1000 / decode.estimatedMs], "one decode step of the chain"),
      metric("projected_decode_tok_s_low", "tok/s", [1000 / decode.highMs], "low end of the band"),
      metric("projected_decode_tok_s_high", "tok/s", [1000 / decode.lowMs], "high end of the band"),
      metric(
        "projected_prefill_call_ms",
        "ms",
        [chunk.estimatedMs],
        `one ${T}-token prefill call of every super-block`,
      ),
      metric(
        "prompt_tokens",
        "tokens",
        turns.map((t) => t.promptTokens),
        "per turn of the full script",
      ),
      metric(
        "cached_tokens",
        "tokens",
        turns.map((t) => t.cachedTokens),
        "per turn of the full script",
      ),
    ],
    notes: [
      `costplan static estimate, M4 Pro, ${report.runtimeBand?.source ?? "no band"}`,
      ...(scale > 1
        ? [
            `one super-block converted; its calls × ${scale} (one dispatch per super-block: pessimistic by the dispatches a fused package saves)`,
          ]
        : []),
      ...report.notes.filter((n) => /host/.test(n)),
    ],
  };
}

async function runAgent(ctx: ScenarioContext, a: AgentParams) {
  const runs: Run[] = [];
  const skipped: Skip[] = [];
  const notes: string[] = [];
  const cli = cliPath();
  if (!cli)
    return {
      runs,
      skipped: [
        {
          what: "agent",
          reason:
            "the built CLI (apps/cli/dist/cli.js) was not found: run pnpm run build, or set ANEMLL_QWEN35_CLI",
        },
      ],
      notes,
    };
  const calibration = a.calibration ? await readCalibration(a.calibration) : ("fitted" as const);
  const mlx = ctx.noMlx ? { available: false, reason: "--no-mlx" } : mlxStatus();
  let measuredTurns: { promptTokens: number; cachedTokens: number }[] | undefined;
  for (const m of a.models) {
    const checkpoint = await m.spec.checkpoint(ctx.log);
    const cap = await maxPositions(checkpoint);
    const modelCtx = Math.min(a.ctx, cap);
    if (modelCtx < a.ctx)
      notes.push(`${m.spec.name}: ctx ${modelCtx} (its max_position_embeddings), not ${a.ctx}`);
    const tokenizer = await loadTokenizer(m.tokenizer ?? checkpoint);
    const encode = (s: string) => tokenizer.encode(s);
    const info = await modelInfo(m.spec);
    const chain = await ensureChain(
      m.spec,
      { ctx: modelCtx, fuse: "all", body: a.body, lmHead: a.lmHead },
      ctx.log,
    );
    const tok = m.tokenizer ? ["--tokenizer", m.tokenizer] : [];
    const sides: { backend: BackendId; args: string[]; skip?: string }[] = [
      { backend: "ane-reference", args: [chain.dir, "--backend", "reference", ...tok] },
      {
        backend: "mlx-cpu",
        args: [
          checkpoint,
          "--backend",
          "mlx",
          "--ctx",
          String(modelCtx),
          ...tok,
          ...(m.mlxBits ? ["--bits", String(m.mlxBits)] : []),
        ],
        skip: mlx.available ? undefined : mlx.reason,
      },
    ];
    for (const side of sides) {
      ctx.signal?.throwIfAborted();
      if (side.skip) {
        skipped.push({ what: `agent · mlx · ${m.spec.name}`, reason: side.skip });
        continue;
      }
      ctx.log(`agent: ${side.backend} · ${m.spec.name} (ctx ${modelCtx}, ${m.script.turns} turns)`);
      let s: Served | undefined;
      try {
        s = await serve(cli, side.args, ctx.log);
        const { turns, toolResultTokens } = await converse(
          s.url,
          "agent",
          m.script,
          modelCtx,
          encode,
          ctx.log,
        );
        if (toolResultTokens < m.script.toolResultTokens)
          notes.push(
            `${m.spec.name} (${side.backend}): tool results of ${toolResultTokens} tokens, not ${m.script.toolResultTokens}, so that ${m.script.turns} turns fit its ctx ${modelCtx}`,
          );
        // the projections cost the full script (the measured run may have shortened it to fit its ctx)
        if (side.backend === "ane-reference" && measuredTurns === undefined)
          measuredTurns = scriptedTurns(turns, toolResultTokens, a.projectScript);
        const backend: BackendId =
          side.backend === "mlx-cpu" ? (await import("../backends.js")).mlxBackendHere() : side.backend;
        runs.push({
          id: `${backend} · ${m.spec.name}`,
          backend,
          model: info,
          conversion: side.backend === "ane-reference" ? conversionOf(chain.manifest, "fp32") : undefined,
          config: {
            ctx: modelCtx,
            turns: m.script.turns,
            tools: m.script.tools,
            toolResultTokens,
            maxTokens: m.script.maxTokens,
            promptCache: true,
          },
          metrics: turnMetrics(turns, s.peakRss()),
          notes: ["served by `anemll-qwen35 serve`, driven by the openai client (streamed, usage included)"],
        });
      } catch (e) {
        if (ctx.signal?.aborted) throw e;
        // one side failing (a timeout, a server error) leaves the others' runs in the result
        skipped.push({ what: `agent · ${side.backend} · ${m.spec.name}`, reason: (e as Error).message });
        ctx.log(`  failed: ${(e as Error).message}`);
      } finally {
        await s?.stop();
      }
    }
  }
  if (measuredTurns) {
    for (const p of a.projections) {
      try {
        ctx.log(`agent: costplan projection · ${p.name}`);
        const ctxP = Math.min(a.ctx, await maxPositions(await p.spec.checkpoint(ctx.log)));
        const chain = await ensureChain(
          p.spec,
          { ctx: ctxP, fuse: "all", body: a.body, lmHead: a.lmHead },
          ctx.log,
        );
        const pr = await project(chain.dir, p.superBlocks, measuredTurns, calibration);
        runs.push({
          id: `ane-coreml projection · ${p.name}`,
          backend: "ane-coreml",
          model: await modelInfo(p.spec),
          conversion: conversionOf(chain.manifest),
          config: {
            projection: "costplan",
            chip: "m4-pro",
            ctx: ctxP,
            model: p.name,
            turns: measuredTurns.length,
          },
          metrics: pr.metrics,
          notes: [
            "a projection (costplan's static model), not a measurement; token counts of the chain run",
            ...pr.notes,
          ],
        });
      } catch (e) {
        if (ctx.signal?.aborted) throw e;
        // a projection that cannot be prepared (a conversion failing) leaves the measured runs
        skipped.push({ what: `agent · projection · ${p.name}`, reason: (e as Error).message });
      }
    }
  } else
    skipped.push({
      what: "agent · projections",
      reason: "no chain run measured the conversation's token counts",
    });
  notes.push(
    "turns are scripted: each adds the same assistant tool call and tool result whatever the model answered (random-weight models), so only token counts matter",
  );
  return { runs, skipped, notes };
}

export const agent: Scenario = {
  name: "agent",
  question:
    "How does a tool-calling agent conversation run through `serve`: TTFT and cached tokens per turn, decode tok/s, peak RSS — and what does costplan project for it on the ANE?",
  run: (ctx, p) => runAgent(ctx, p.agent),
  charts(result): ChartSpec[] {
    const series = (measured: boolean) =>
      result.runs.flatMap((r) => {
        const get = (n: string) => r.metrics.find((x) => x.name === n)?.samples;
        const y = get(measured ? "ttft_ms" : "projected_ttft_ms");
        if (!y) return [];
        const lo = measured ? y : (get("projected_ttft_ms_low") ?? y);
        const hi = measured ? y : (get("projected_ttft_ms_high") ?? y);
        return y.map((v, i) => ({
          x: i + 1,
          run: r.id,
          median: v / 1000,
          p10: lo[i] / 1000,
          p90: hi[i] / 1000,
        }));
      });
    const axes = { xTitle: "turn", xType: "ordinal" as const, yTitle: "TTFT (s)", color: "run" };
    return [
      lineChart(
        "ttft",
        `Agent conversation through serve: TTFT per turn · ${result.scale}`,
        series(true),
        axes,
      ),
      lineChart(
        "ttft-projected",
        "costplan projection on the M4 Pro ANE: TTFT per turn (band)",
        series(false),
        axes,
      ),
    ];
  },
};

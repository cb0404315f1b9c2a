/** `serve`: an OpenAI-compatible HTTP server over one or more models (@anemll-qwen35/server). */
import { type BackendName, runModelRank } from "@anemll-qwen35/models";
import {
  attachToLauncher,
  DEFAULT_JOIN_TIMEOUT_MS,
  DEFAULT_STEP_TIMEOUT_MS,
  launchedRank,
} from "@anemll-qwen35/runtime-mlx";
import {
  createServer,
  DEFAULT_DRAIN_MS,
  DEFAULT_HOST,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_PORT,
  DEFAULT_PROMPT_CACHE_BYTES,
  DEFAULT_QUEUE,
  defaultName,
  type PathModelSource,
  type RequestLog,
} from "@anemll-qwen35/server";
import type { Command } from "commander";
import type { Context } from "../context.js";
import { addModelOptions, loadOptions, type ModelOptions } from "../model.js";
import { bytes, int, num, UsageError } from "../options.js";

export function registerServe(program: Command, ctx: Context): void {
  const cmd = program
    .command("serve")
    .description(
      "serve models over the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models) until Ctrl-C",
    )
    .argument(
      "[models...]",
      "converted chain folders (Core ML / reference) or Qwen3.5 checkpoints (MLX: a folder or hf:owner/name)",
    )
    .option(
      "--model <name=path>",
      "a model under a name of your choice (repeatable); NAME=BACKEND:PATH picks its backend",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option("--host <host>", "address to listen on (127.0.0.1: this machine only)", DEFAULT_HOST)
    .option("--port <n>", "port (0: any free one)", int("--port", 0, 65535), DEFAULT_PORT)
    .option(
      "--api-key <key>",
      "require Authorization: Bearer <key>; repeat for several clients, each with its own prompt cache (default: $ANEMLL_API_KEY, comma-separated); required beyond loopback",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option(
      "--allowed-host <name>",
      "a Host name to answer besides localhost, 127.0.0.1 and ::1 (repeatable; * for any); others get 403 (DNS rebinding)",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option(
      "--cors-origin <origin>",
      "a web origin (scheme://host[:port]) whose pages may call the server, with CORS (repeatable; * for any); other pages get 403",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option("--queue <n>", "requests that may wait per model; more get 429", int("--queue", 0), DEFAULT_QUEUE)
    .option(
      "--max-body <size>",
      "largest request body (e.g. 2mb, 512kb; default: the server's 1 MiB)",
      bytes("--max-body"),
      DEFAULT_MAX_BODY_BYTES,
    )
    .option("--model-name <name>", "the name clients use for the model (one model only)")
    .option(
      "--prompt-cache <size>",
      "each model's prompt cache: state snapshots by prompt prefix, so requests sharing a system prompt and tools skip that prefill (size limit, e.g. 2gb)",
      bytes("--prompt-cache"),
      DEFAULT_PROMPT_CACHE_BYTES,
    )
    .option("--no-prompt-cache", "turn the prompt cache off (every request prefills its whole prompt)")
    .option(
      "--drain <seconds>",
      "on Ctrl-C / SIGTERM, how long the requests in flight may take to finish",
      num("--drain", 0),
      DEFAULT_DRAIN_MS / 1000,
    );
  cmd
    .option(
      "--split <name>",
      "under `launch`: the model split across the ranks (default: the only model); the others run on rank 0 alone",
    )
    .option(
      "--split-layers <n,n,...>",
      "under `launch`: layers per rank (default: in proportion to each rank's memory)",
      layerCounts,
    )
    .option(
      "--join-timeout <seconds>",
      "under `launch`: how long the ranks may take to connect",
      num("--join-timeout", 1),
      DEFAULT_JOIN_TIMEOUT_MS / 1000,
    )
    .option(
      "--step-timeout <seconds>",
      "under `launch`: a step with no answer from the other ranks in this long means a rank is lost",
      num("--step-timeout", 1),
      DEFAULT_STEP_TIMEOUT_MS / 1000,
    );
  addModelOptions(cmd);
  cmd.action(async (paths: string[], o) => {
    const out = ctx.output();
    const sources = modelSources(paths, o, out.notice);
    const split = splitSource(sources, o);
    if (split && split.rank > 0) {
      // This rank holds layers of one model for rank 0, which serves it; it ends when rank 0 does.
      const stats = await runModelRank(split.source.path, {
        ...split.source,
        onReady: (r) =>
          out.notice(
            `rank ${r.rank} (pid ${process.pid}): layers ${r.layers.start}-${r.layers.end - 1} of ${split.name} loaded; serving them for rank 0`,
          ),
      });
      out.notice(`rank ${stats.rank}: rank 0 stopped after ${stats.steps} step(s); done`);
      return;
    }
    const apiKeys: string[] = o.apiKey ?? envKeys(process.env.ANEMLL_API_KEY);
    const server = await createServer({
      models: sources,
      host: o.host,
      port: o.port,
      apiKey: apiKeys,
      allowedHosts: o.allowedHost,
      corsOrigins: o.corsOrigin,
      queue: o.queue,
      maxBodyBytes: Math.round(o.maxBody),
      promptCache: o.promptCache === false ? false : { maxBytes: Math.round(o.promptCache) },
      onRequestEnd: (l) => out.notice(logLine(l)),
    });
    const stop = new AbortController();
    // the first signal drains (no new requests, the running ones finish); a second stops at once
    const onSignal = () => {
      if (!stop.signal.aborted) stop.abort();
      else void server.close({ drainMs: 0 });
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      const url = await server.listen();
      out.result({
        url: `${url}/v1`,
        models: server.models.map((m) => ({
          id: m.name,
          backend: m.backend,
          contextLength: m.model.contextLength,
          promptCacheBytes: m.promptCache?.maxBytes ?? 0,
        })),
      });
      const keys = apiKeys.length === 1 ? "API key required" : `${apiKeys.length} API keys, one per client`;
      out.line(`serving the OpenAI API at ${url}/v1${apiKeys.length > 0 ? ` (${keys})` : ""}`);
      for (const m of server.models) {
        out.line(
          `  ${m.name} · ${m.backend} · context ${m.model.contextLength} tokens · queue ${m.queue.capacity} · ${cacheText(m.promptCache?.maxBytes)}`,
        );
      }
      out.notice("Ctrl-C to stop");
      if (!stop.signal.aborted) {
        await new Promise<void>((resolve) =>
          stop.signal.addEventListener("abort", () => resolve(), { once: true }),
        );
      }
      const n = server.inFlight;
      out.notice(
        n === 0
          ? "stopping"
          : `stopping: no new requests; finishing the ${n} in flight (up to ${o.drain} s; Ctrl-C again to stop now)…`,
      );
    } finally {
      await server.close({ drainMs: o.drain * 1000 });
      process.removeListener("SIGINT", onSignal);
      process.removeListener("SIGTERM", onSignal);
    }
  });
}

interface ServeOptions extends ModelOptions, SplitOptions {
  model?: string[];
  apiKey?: string[];
  allowedHost?: string[];
  corsOrigin?: string[];
  promptCache?: number | false;
  drain?: number;
  modelName?: string;
}

/** Positional folders and `--model NAME=[BACKEND:]PATH` → model sources. */
function modelSources(
  paths: readonly string[],
  o: ServeOptions,
  notice: (s: string) => void,
): PathModelSource[] {
  const common = loadOptions(o, notice);
  const sources: PathModelSource[] = paths.map((path) => ({ path, ...common }));
  for (const spec of o.model ?? []) {
    const m = /^([^=]+)=(?:(coreml|reference|mlx):)?(.+)$/.exec(spec);
    if (!m) throw new UsageError(`--model must be NAME=PATH or NAME=BACKEND:PATH, got "${spec}"`);
    sources.push({
      ...common,
      name: m[1],
      path: m[3],
      backend: (m[2] as BackendName | undefined) ?? o.backend,
    });
  }
  if (sources.length === 0) {
    throw new UsageError("serve needs at least one model: a folder argument or --model NAME=PATH");
  }
  if (o.modelName !== undefined) {
    if (sources.length !== 1) {
      throw new UsageError("--model-name names a single model; with several, use --model NAME=PATH for each");
    }
    sources[0].name = o.modelName;
  }
  return sources;
}

function cacheText(maxBytes: number | undefined): string {
  return maxBytes === undefined ? "no prompt cache" : `prompt cache ${(maxBytes / 1e6).toFixed(0)} MB`;
}

interface SplitOptions {
  split?: string;
  splitLayers?: number[];
  joinTimeout: number;
  stepTimeout: number;
}

/**
 * Under `launch` (MLX_RANK and MLX_HOSTFILE set): the model split across the ranks, marked so that
 * loadModel splits it; undefined when this process was not launched.
 */
function splitSource(
  sources: PathModelSource[],
  o: SplitOptions,
): { rank: number; name: string; source: PathModelSource } | undefined {
  const rank = launchedRank();
  // a rank of `launch`: take the launch's secret now, and stop when the launcher is gone (joining reports a failure)
  if (rank !== undefined) attachToLauncher().catch(() => {});
  if (rank === undefined) {
    if (o.split !== undefined || o.splitLayers !== undefined) {
      throw new UsageError(
        "--split and --split-layers need the ranks `anemll-qwen35 launch --hosts hosts.json -- serve ...` starts",
      );
    }
    return undefined;
  }
  const named = sources.map((s) => ({ name: s.name ?? defaultName(s.path), source: s }));
  let pick: (typeof named)[number] | undefined;
  if (o.split !== undefined) {
    pick = named.find((n) => n.name === o.split);
    if (!pick) {
      throw new UsageError(
        `--split ${o.split}: no such model; serve has ${named.map((n) => n.name).join(", ")}`,
      );
    }
  } else if (named.length === 1) {
    pick = named[0];
  } else {
    throw new UsageError(
      `under launch, name the model to split across the ranks with --split (one of ${named.map((n) => n.name).join(", ")})`,
    );
  }
  if (pick.source.backend !== "auto" && pick.source.backend !== "mlx" && pick.source.backend !== undefined) {
    throw new UsageError(
      `--split ${pick.name}: only the mlx backend splits a model, not ${pick.source.backend}`,
    );
  }
  pick.source.backend = "mlx";
  pick.source.distributed = {
    split: o.splitLayers,
    timeoutMs: o.joinTimeout * 1000,
    stepTimeoutMs: o.stepTimeout * 1000,
  };
  return { rank, ...pick };
}

/** `6,9,9` → [6, 9, 9]. */
function layerCounts(v: string): number[] {
  const counts = v.split(",").map((x) => Number(x.trim()));
  if (counts.some((n) => !Number.isInteger(n) || n < 1)) {
    throw new UsageError(`--split-layers must be positive integers separated by commas, got "${v}"`);
  }
  return counts;
}

/** `$ANEMLL_API_KEY`: one key, or several separated by commas. */
function envKeys(v: string | undefined): string[] {
  return (v ?? "")
    .split(",")
    .map((k) => k.trim())
    .filter((k) => k !== "");
}

function logLine(l: RequestLog): string {
  const parts = [`${l.method} ${l.url} ${l.status}`];
  if (l.model) parts.push(l.model);
  if (l.promptTokens !== undefined)
    parts.push(
      `${l.promptTokens}+${l.completionTokens ?? 0} tok${l.cachedTokens ? ` (${l.cachedTokens} cached)` : ""}`,
    );
  if (l.finishReason) parts.push(l.finishReason);
  parts.push(
    `${l.totalMs.toFixed(0)} ms${l.queuedMs && l.queuedMs >= 1 ? ` (queued ${l.queuedMs.toFixed(0)} ms)` : ""}`,
  );
  if (l.error) parts.push(`— ${l.error}`);
  return parts.join(" · ");
}

/**
 * Model references: a local folder, or `hf:owner/name[@revision]` resolved through the standard
 * Hugging Face cache layout (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`)
 * so that downloads are shared with Python tools. Downloads go through `@huggingface/hub`.
 */
import { existsSync, statSync } from "node:fs";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { basename, join, resolve } from "node:path";
import { AnemllError } from "@anemll-qwen35/core";
import { downloadFileToCacheDir, listFiles, modelInfo } from "@huggingface/hub";

export type ModelRef =
  | { readonly kind: "local"; readonly path: string }
  | { readonly kind: "hf"; readonly repo: string; readonly revision: string };

/** The model could not be found locally and could not (or may not) be downloaded. */
export class ModelRefError extends AnemllError {
  readonly ref: string;
  constructor(ref: string, message: string, options?: { cause?: unknown }) {
    super("E_MODEL_REF", message, options);
    this.ref = ref;
  }
}

/** Tokenizer and sampling files, wanted from checkpoints and converted chains alike. */
const SIDE_FILES = [
  /^generation_config\.json$/,
  /^tokenizer\.json$/,
  /^tokenizer_config\.json$/,
  /^chat_template\.jinja$/,
  /^special_tokens_map\.json$/,
];

/** The files a Qwen3.5 conversion or MLX run needs; everything else in a repo is left alone. */
const CHECKPOINT_FILES = [
  /^config\.json$/,
  /\.safetensors$/,
  /^model\.safetensors\.index\.json$/,
  ...SIDE_FILES,
];

/** A converted chain as `convert` writes it: model.json and its packages (nested folders). */
const CHAIN_FILES = [/^model\.json$/, /^[^/]+\.mlpackage\/.+$/, ...SIDE_FILES];

/** Whether a top-level file of a checkpoint repository is needed. */
export function isWantedModelFile(path: string): boolean {
  return !path.includes("/") && CHECKPOINT_FILES.some((re) => re.test(path));
}

/**
 * The files to fetch from a repository listing: a converted chain's (when it has model.json at its
 * root) or a checkpoint's.
 */
export function wantedModelFiles(paths: readonly string[]): {
  kind: "chain" | "checkpoint";
  files: string[];
} {
  if (paths.includes("model.json")) {
    return { kind: "chain", files: paths.filter((p) => CHAIN_FILES.some((re) => re.test(p))) };
  }
  return { kind: "checkpoint", files: paths.filter(isWantedModelFile) };
}

const REPO_RE = /^[A-Za-z0-9][\w.-]*\/[\w.-]+$/;

export function parseModelRef(ref: string): ModelRef {
  if (!ref.startsWith("hf:")) return { kind: "local", path: resolve(ref) };
  const body = ref.slice(3);
  const at = body.indexOf("@");
  const repo = at < 0 ? body : body.slice(0, at);
  const revision = at < 0 ? "main" : body.slice(at + 1);
  if (!REPO_RE.test(repo) || revision === "") {
    throw new ModelRefError(ref, `"${ref}" is not a model reference: expected hf:owner/name[@revision]`);
  }
  return { kind: "hf", repo, revision };
}

/** The Hugging Face hub cache folder, as huggingface_hub (Python) computes it. */
export function hfHubCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  const home = env.HF_HOME ?? join(env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "huggingface");
  return join(home, "hub");
}

function repoFolder(cacheDir: string, repo: string): string {
  return join(cacheDir, `models--${repo.replace("/", "--")}`);
}

const COMMIT_RE = /^[0-9a-f]{40}$/;

/** The cached snapshot folder for a revision, or undefined when it is not cached (or incomplete). */
export async function findCachedSnapshot(
  cacheDir: string,
  repo: string,
  revision: string,
): Promise<string | undefined> {
  const folder = repoFolder(cacheDir, repo);
  let commit = revision;
  if (!COMMIT_RE.test(revision)) {
    const refFile = join(folder, "refs", revision);
    if (!existsSync(refFile)) return undefined;
    commit = (await readFile(refFile, "utf8")).trim();
  }
  const snapshot = join(folder, "snapshots", commit);
  return looksLikeCheckpoint(snapshot) ? snapshot : undefined;
}

function looksLikeCheckpoint(dir: string): boolean {
  if (existsSync(join(dir, "model.json"))) return true; // a converted chain
  if (!existsSync(join(dir, "config.json"))) return false;
  return existsSync(join(dir, "model.safetensors.index.json")) || existsSync(join(dir, "model.safetensors"));
}

export interface ResolveProgress {
  readonly stage: "download";
  readonly file: string;
  /** Bytes of the wanted files finished so far and in all. */
  readonly bytes: number;
  readonly totalBytes: number;
  readonly fraction: number;
}

export interface ResolveOptions {
  /** Defaults to hfHubCacheDir(). */
  cacheDir?: string;
  /** Hub endpoint; defaults to $HF_ENDPOINT or the public hub. */
  hubUrl?: string;
  accessToken?: string;
  /** When false (or HF_HUB_OFFLINE=1), only the cache is consulted. */
  allowDownload?: boolean;
  onProgress?: (p: ResolveProgress) => void;
  signal?: AbortSignal;
  fetch?: typeof fetch;
}

/** Resolves a model reference to a local folder, downloading the wanted files when needed. */
export async function resolveModelRef(ref: string, options: ResolveOptions = {}): Promise<string> {
  const parsed = parseModelRef(ref);
  if (parsed.kind === "local") {
    if (!existsSync(parsed.path) || !statSync(parsed.path).isDirectory()) {
      throw new ModelRefError(ref, `model folder ${parsed.path} does not exist`);
    }
    return (await cacheEntrySnapshot(parsed.path, ref)) ?? parsed.path;
  }
  const cacheDir = options.cacheDir ?? hfHubCacheDir();
  const cached = await findCachedSnapshot(cacheDir, parsed.repo, parsed.revision);
  if (cached) return cached;
  const offline = process.env.HF_HUB_OFFLINE === "1" || options.allowDownload === false;
  if (offline) {
    throw new ModelRefError(
      ref,
      `${parsed.repo}@${parsed.revision} cannot be downloaded (HF_HUB_OFFLINE=1 or allowDownload: false) and ` +
        notCachedHint(parsed.repo, cacheDir),
    );
  }
  return download(ref, parsed.repo, parsed.revision, cacheDir, options);
}

/**
 * A Hugging Face cache entry given as a folder (`…/hub/models--Qwen--Qwen3.5-0.8B`): its snapshot
 * for refs/main, else its newest complete one. Undefined for any other folder.
 */
async function cacheEntrySnapshot(dir: string, ref: string): Promise<string | undefined> {
  if (!/^models--[^/]+--[^/]+$/.test(basename(dir)) || !existsSync(join(dir, "snapshots"))) return undefined;
  const main = join(dir, "refs", "main");
  if (existsSync(main)) {
    const snapshot = join(dir, "snapshots", (await readFile(main, "utf8")).trim());
    if (looksLikeCheckpoint(snapshot)) return snapshot;
  }
  const snapshots = (await readdir(join(dir, "snapshots")))
    .map((name) => join(dir, "snapshots", name))
    .filter(looksLikeCheckpoint)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  if (snapshots.length === 0) {
    throw new ModelRefError(
      ref,
      `${dir} is a Hugging Face cache entry without a complete snapshot (config.json and weights, or model.json)`,
    );
  }
  return snapshots[0];
}

/** Where a reference was looked for, and what else works, for messages about a failed resolution. */
function notCachedHint(repo: string, cacheDir: string): string {
  return (
    `it is not in the Hugging Face cache (looked in ${repoFolder(cacheDir, repo)}; HF_HOME or HF_HUB_CACHE ` +
    "move the cache, HF_HUB_OFFLINE=1 uses it without trying the network). Fetch it where there is a network (`huggingface-cli download " +
    `${repo}\` fills the same cache), or give a local folder: a checkpoint or converted model, or that cache entry`
  );
}

async function download(
  ref: string,
  repo: string,
  revision: string,
  cacheDir: string,
  options: ResolveOptions,
): Promise<string> {
  const common = {
    repo: { type: "model" as const, name: repo },
    hubUrl: options.hubUrl ?? process.env.HF_ENDPOINT,
    accessToken: options.accessToken ?? process.env.HF_TOKEN,
    fetch: options.fetch,
  };
  try {
    const info = await modelInfo({ ...common, name: repo, revision, additionalFields: ["sha"] });
    const commit = (info as { sha?: string }).sha;
    if (!commit) throw new Error("the hub did not report a commit for this revision");
    const listed = new Map<string, number>();
    for await (const entry of listFiles({ ...common, revision: commit, recursive: true })) {
      if (entry.type === "file") listed.set(entry.path, entry.size);
    }
    const wanted = wantedModelFiles([...listed.keys()]);
    if (wanted.kind === "checkpoint" && !listed.has("config.json")) {
      throw new Error(
        "the repository has neither config.json (a checkpoint) nor model.json (a converted chain)",
      );
    }
    const files = wanted.files.map((path) => ({ path, size: listed.get(path) ?? 0 }));
    const totalBytes = files.reduce((s, f) => s + f.size, 0);
    let bytes = 0;
    let snapshot = "";
    for (const file of files) {
      options.signal?.throwIfAborted();
      const pointer = await downloadFileToCacheDir({
        ...common,
        path: file.path,
        revision: commit,
        cacheDir,
      });
      snapshot = pointer.slice(0, pointer.length - file.path.length - 1);
      bytes += file.size;
      options.onProgress?.({
        stage: "download",
        file: file.path,
        bytes,
        totalBytes,
        fraction: bytes / totalBytes,
      });
    }
    // Record the branch/tag so later offline runs find the snapshot.
    if (revision !== commit) {
      await mkdir(join(repoFolder(cacheDir, repo), "refs"), { recursive: true });
      await writeFile(join(repoFolder(cacheDir, repo), "refs", revision), commit);
    }
    return snapshot;
  } catch (err) {
    if (err instanceof ModelRefError || (err as Error).name === "AbortError") throw err;
    const why = (err as Error).message;
    // no network (or no hub): say where the model was looked for and what works offline
    const offline = /fetch failed|ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|network/i.test(why);
    throw new ModelRefError(
      ref,
      `could not download ${repo}@${revision} (${why})${offline ? `; ${notCachedHint(repo, cacheDir)}` : ""}`,
      { cause: err },
    );
  }
}

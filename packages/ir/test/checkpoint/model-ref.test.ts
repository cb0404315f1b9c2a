import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  hfHubCacheDir,
  ModelRefError,
  parseModelRef,
  resolveModelRef,
} from "../../src/checkpoint/model-ref.js";

/**
 * A local stand-in for the four hub endpoints that @huggingface/hub's cache download uses
 * (model info, tree listing, paths-info, resolve). It serves a tiny repository from memory, so the
 * real download code runs end to end without the network.
 */
const COMMIT = "0123456789abcdef0123456789abcdef01234567";
const REPOS: Record<string, Record<string, Buffer>> = {
  "acme/tiny": {
    "config.json": Buffer.from('{"model_type":"qwen3_5"}'),
    "model.safetensors.index.json": Buffer.from('{"weight_map":{}}'),
    "model.safetensors-00001-of-00001.safetensors": Buffer.from("weights-bytes"),
    "tokenizer.json": Buffer.from("{}"),
    "README.md": Buffer.from("not wanted"),
  },
  // a converted chain as people publish them: model.json, packages (nested files), tokenizer
  "acme/tiny-ane": {
    "model.json": Buffer.from('{"format":"anemll-qwen35.chain"}'),
    "embed.mlpackage/Manifest.json": Buffer.from("{}"),
    "embed.mlpackage/Data/com.apple.CoreML/model.mlmodel": Buffer.from("proto"),
    "embed.mlpackage/Data/com.apple.CoreML/weights/weight.bin": Buffer.from("blob"),
    "tokenizer.json": Buffer.from("{}"),
    "source/config.json": Buffer.from("not wanted"),
    "README.md": Buffer.from("not wanted"),
  },
};
const oid = (b: Buffer) => createHash("sha1").update(b).digest("hex");
const requested: string[] = [];

function startHub(): Promise<Server> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    requested.push(`${req.method} ${url.pathname}`);
    const json = (v: unknown) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(v));
    };
    const repo = Object.keys(REPOS).find(
      (r) => url.pathname.startsWith(`/api/models/${r}/`) || url.pathname.startsWith(`/${r}/`),
    );
    const FILES = repo ? REPOS[repo] : {};
    const entry = (path: string) => ({ type: "file", path, oid: oid(FILES[path]), size: FILES[path].length });
    if (url.pathname === `/api/models/${repo}/revision/main`)
      return json({ _id: "x", id: repo, sha: COMMIT });
    if (url.pathname === `/api/models/${repo}/tree/${COMMIT}`) return json(Object.keys(FILES).map(entry));
    if (url.pathname === `/api/models/${repo}/paths-info/${COMMIT}` && req.method === "POST") {
      let body = "";
      req.on("data", (c) => {
        body += c;
      });
      req.on("end", () => {
        const { paths } = JSON.parse(body) as { paths: string[] };
        json(paths.map((p) => ({ ...entry(p), lastCommit: { id: COMMIT, title: "t", date: "2026-01-01" } })));
      });
      return;
    }
    const m = url.pathname.match(new RegExp(`^/${repo}/resolve/([^/]+)/(.+)$`));
    if (m && FILES[m[2]]) {
      const data = FILES[m[2]];
      if (req.headers.range === "bytes=0-0") {
        res.statusCode = 206;
        res.setHeader("content-range", `bytes 0-0/${data.length}`);
        res.setHeader("etag", `"${oid(data)}"`);
        return res.end(data.subarray(0, 1));
      }
      return res.end(data);
    }
    res.statusCode = 404;
    res.setHeader("X-Error-Code", "RepoNotFound");
    json({ error: "not found" });
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server)));
}

describe("model references", () => {
  let server: Server;
  let hubUrl: string;
  beforeAll(async () => {
    server = await startHub();
    hubUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => server.close());

  it("parses local paths and hf: references", () => {
    expect(parseModelRef("hf:Qwen/Qwen3.5-0.8B")).toEqual({
      kind: "hf",
      repo: "Qwen/Qwen3.5-0.8B",
      revision: "main",
    });
    expect(parseModelRef("hf:Qwen/Qwen3.5-9B@abc")).toMatchObject({ revision: "abc" });
    expect(parseModelRef("./x").kind).toBe("local");
    expect(() => parseModelRef("hf:noslash")).toThrow(ModelRefError);
    expect(() => parseModelRef("hf:a/b@")).toThrow(/hf:owner\/name/);
  });

  it("follows HF_HUB_CACHE, HF_HOME and XDG_CACHE_HOME like huggingface_hub", () => {
    expect(hfHubCacheDir({ HF_HUB_CACHE: "/c" })).toBe("/c");
    expect(hfHubCacheDir({ HF_HOME: "/h" })).toBe("/h/hub");
    expect(hfHubCacheDir({ XDG_CACHE_HOME: "/x" })).toBe("/x/huggingface/hub");
  });

  it("downloads only the wanted files into the cache layout, then resolves offline", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "hfcache-"));
    const events: number[] = [];
    const dir = await resolveModelRef("hf:acme/tiny", {
      cacheDir,
      hubUrl,
      onProgress: (p) => events.push(p.fraction),
    });
    expect(dir).toBe(join(cacheDir, "models--acme--tiny", "snapshots", COMMIT));
    expect(readFileSync(join(dir, "config.json"), "utf8")).toContain("qwen3_5");
    expect(existsSync(join(dir, "model.safetensors-00001-of-00001.safetensors"))).toBe(true);
    expect(existsSync(join(dir, "README.md"))).toBe(false);
    expect(readFileSync(join(cacheDir, "models--acme--tiny", "refs", "main"), "utf8")).toBe(COMMIT);
    expect(events.at(-1)).toBe(1);

    requested.length = 0;
    const again = await resolveModelRef("hf:acme/tiny", { cacheDir, hubUrl, allowDownload: false });
    expect(again).toBe(dir);
    expect(requested).toEqual([]);
  });

  it("downloads a converted chain: model.json, its packages' nested files and the tokenizer", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "hfcache-"));
    const dir = await resolveModelRef("hf:acme/tiny-ane", { cacheDir, hubUrl });
    expect(dir).toBe(join(cacheDir, "models--acme--tiny-ane", "snapshots", COMMIT));
    expect(readFileSync(join(dir, "embed.mlpackage/Data/com.apple.CoreML/weights/weight.bin"), "utf8")).toBe(
      "blob",
    );
    expect(existsSync(join(dir, "model.json"))).toBe(true);
    expect(existsSync(join(dir, "tokenizer.json"))).toBe(true);
    expect(existsSync(join(dir, "source"))).toBe(false);
    expect(existsSync(join(dir, "README.md"))).toBe(false);
    await expect(resolveModelRef("hf:acme/tiny-ane", { cacheDir, allowDownload: false })).resolves.toBe(dir);
  });

  it("finds snapshots made by other tools and reports missing ones clearly", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "hfcache-"));
    const snap = join(cacheDir, "models--o--m", "snapshots", COMMIT);
    mkdirSync(snap, { recursive: true });
    writeFileSync(join(snap, "config.json"), "{}");
    writeFileSync(join(snap, "model.safetensors"), "");
    await expect(resolveModelRef(`hf:o/m@${COMMIT}`, { cacheDir, allowDownload: false })).resolves.toBe(snap);
    await expect(resolveModelRef("hf:o/m", { cacheDir, allowDownload: false })).rejects.toThrow(
      /not in the Hugging Face cache/,
    );
    await expect(resolveModelRef("hf:acme/missing", { cacheDir, hubUrl })).rejects.toThrow(ModelRefError);
    await expect(resolveModelRef("/no/such/dir")).rejects.toThrow(/does not exist/);
  });

  it("offline, names the cache folder it looked in, HF_HOME and what works instead", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "hfcache-"));
    const entry = join(cacheDir, "models--acme--gone");
    for (const o of [
      { allowDownload: false },
      // nothing listens there: what a machine without a network sees ("fetch failed")
      { hubUrl: "http://127.0.0.1:9" },
    ]) {
      const err = await resolveModelRef("hf:acme/gone", { cacheDir, ...o }).catch((e) => e);
      expect(err).toBeInstanceOf(ModelRefError);
      expect(err.message).toContain(`looked in ${entry}`);
      expect(err.message).toMatch(/HF_HOME or HF_HUB_CACHE/);
      expect(err.message).toMatch(/HF_HUB_OFFLINE=1 uses it without trying the network/);
      expect(err.message).toMatch(/give a local folder/);
    }
  });

  it("takes a cache entry folder (models--owner--name) as a path: refs/main, else the newest snapshot", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "hfcache-"));
    const entry = join(cacheDir, "models--o--m");
    const snapshot = (commit: string) => {
      const d = join(entry, "snapshots", commit);
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, "config.json"), "{}");
      writeFileSync(join(d, "model.safetensors"), "");
      return d;
    };
    const older = snapshot("a".repeat(40));
    await expect(resolveModelRef(entry)).resolves.toBe(older);
    const main = snapshot("b".repeat(40));
    mkdirSync(join(entry, "refs"));
    writeFileSync(join(entry, "refs", "main"), "b".repeat(40));
    await expect(resolveModelRef(entry)).resolves.toBe(main);
    const empty = join(cacheDir, "models--o--empty");
    mkdirSync(join(empty, "snapshots"), { recursive: true });
    await expect(resolveModelRef(empty)).rejects.toThrow(/cache entry without a complete snapshot/);
  });
});

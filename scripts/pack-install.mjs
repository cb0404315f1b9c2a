#!/usr/bin/env node
// Installs the packages the way users get them: `pnpm pack` every public package, `npm install` the
// tarballs into fresh projects outside the workspace (no workspace links), then import each
// package's public entry points, run the CLI from its bin (doctor, demo, doctor --selftest), serve
// a converted chain from the installed bin (a prompt long enough for the tokenizer worker; a
// cross-origin request and a DNS-rebinding Host refused), type-check a consumer file of names the
// READMEs document against the published .d.ts, check that @anemll-qwen35/generate installs without
// protobufjs, zod and the hub client, and that `pnpm publish -r --dry-run` and `changeset version`
// run clean.
// Needs the workspace built (`pnpm run build`) and the npm registry for third-party dependencies.
//
//   node scripts/pack-install.mjs [--keep] [--skip-publish]
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { packAll, publicPackages } from "./pack.mjs";
import { documentedNames } from "./readme-api.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** Consumer files not type-checked yet, each with the change that removes it. */
const UNCHECKED_CONSUMERS = new Map([
  [
    "bench.ts",
    "bench's .d.ts imports the private testkit; removed when bench stops bundling testkit (issue 24 item 5)",
  ],
]);
const keep = process.argv.includes("--keep");
const work = mkdtempSync(join(tmpdir(), "anemll-pack-"));
const started = Date.now();

function step(what) {
  console.log(`[pack-install ${((Date.now() - started) / 1000).toFixed(0)} s] ${what}`);
}

function run(cmd, args, o = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...o });
  if (r.status !== 0) {
    throw new Error(
      `${cmd} ${args.join(" ")} (in ${o.cwd ?? process.cwd()}) exited ${r.status}:\n${r.stdout}\n${r.stderr}`,
    );
  }
  return r.stdout;
}

/** The site-packages mlx folder of the repository's .venv, so that runtime-mlx's install builds its addon. */
function mlxRoot() {
  const py = join(root, ".venv", "bin", "python");
  if (!existsSync(py)) return undefined;
  try {
    return execFileSync(py, ["-c", "import mlx; print(list(mlx.__path__)[0])"], { encoding: "utf8" }).trim();
  } catch {
    return undefined;
  }
}

/** One HTTP request with the headers as given (fetch would not send a forged Host). */
function http(url, path, { headers = {}, body } = {}) {
  const { hostname, port } = new URL(url);
  const data = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: hostname,
        port,
        path,
        method: data ? "POST" : "GET",
        headers: { ...(data ? { "content-type": "application/json" } : {}), ...headers },
      },
      (res) => {
        let text = "";
        res.on("data", (d) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text }));
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

/**
 * `serve` from the installed bin over `chain`: a chat prompt of "hello world " × 400 (4,800
 * characters: over the 4,096 encoded on the event loop, so the tokenizer worker must ship in the
 * tarball) is answered, and a web page's requests are refused (another Origin; a rebinding Host).
 */
async function serveInstalled(app, chain) {
  const bin = join(app, "node_modules", ".bin", "anemll-qwen35");
  const child = spawn(bin, ["serve", chain, "--backend", "reference", "--port", "0"], {
    cwd: app,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ANEMLL_API_KEY: "" },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("close", (code) => resolve(code)));
  try {
    const url = await new Promise((resolve, reject) => {
      const check = () => {
        const m = /serving the OpenAI API at (http:\/\/\S+)\/v1/.exec(stdout);
        if (m) resolve(m[1]);
      };
      child.stdout.on("data", check);
      exited.then((code) =>
        reject(new Error(`serve exited ${code} before listening:\n${stdout}\n${stderr}`)),
      );
    });
    const content = "hello world ".repeat(400);
    const chat = { model: "chain", max_tokens: 2, messages: [{ role: "user", content }] };
    const long = await http(url, "/v1/chat/completions", { body: chat });
    if (long.status !== 200) throw new Error(`the long prompt got ${long.status}: ${long.text}`);
    const tokens = JSON.parse(long.text).usage.prompt_tokens;
    if (!(tokens > 400)) throw new Error(`the long prompt came to ${tokens} tokens`);
    const page = await http(url, "/v1/chat/completions", {
      body: chat,
      headers: { origin: "http://evil.example" },
    });
    if (
      page.status !== 403 ||
      !/origin_not_allowed/.test(page.text) ||
      page.headers["access-control-allow-origin"]
    )
      throw new Error(`a cross-origin request got ${page.status}: ${page.text}`);
    const port = new URL(url).port;
    const rebound = await http(url, "/v1/models", {
      headers: { host: `evil.example:${port}`, origin: `http://evil.example:${port}` },
    });
    if (rebound.status !== 403 || !/host_not_allowed/.test(rebound.text))
      throw new Error(`a DNS-rebinding request got ${rebound.status}: ${rebound.text}`);
    child.kill("SIGTERM");
    const code = await exited;
    if (code !== 0) throw new Error(`serve exited ${code} on SIGTERM:\n${stderr}`);
    return tokens;
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
}

function consumer(name, tarballs, env) {
  const dir = join(work, name);
  mkdirSync(dir);
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, type: "module" }, null, 2));
  run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...tarballs], { cwd: dir, env });
  return dir;
}

try {
  const pkgs = publicPackages();
  step(`packing ${pkgs.length} public packages`);
  const tarDir = join(work, "tarballs");
  const tarballs = packAll(tarDir); // as the README's install from tarballs does
  if (tarballs.length !== pkgs.length)
    throw new Error(`expected ${pkgs.length} tarballs, got ${tarballs.length}`);

  const mlx = mlxRoot();
  step(
    `npm install of every tarball (runtime-mlx's addon ${mlx ? `built against ${mlx}` : "skipped: no MLX found"})`,
  );
  const env = { ...process.env, ...(mlx ? { MLX_ROOT: mlx } : {}) };
  delete env.npm_config_user_agent; // not a pnpm install
  const app = consumer("consumer", tarballs, env);
  for (const p of pkgs) {
    const installed = join(app, "node_modules", ...p.name.split("/"));
    if (existsSync(join(installed, "node_modules", "@anemll-qwen35")))
      throw new Error(`${p.name} got a nested copy of a workspace package (a version mismatch)`);
  }

  step("importing every public entry point");
  const entries = pkgs.flatMap((p) => p.exports.map((e) => (e === "." ? p.name : `${p.name}/${e.slice(2)}`)));
  const probe = `
    const entries = ${JSON.stringify(entries)};
    const want = {
      "@anemll-qwen35/core": ["AnemllError", "tensor"],
      "@anemll-qwen35/ir/checkpoint": ["Qwen35Checkpoint", "qwen35Parameters", "resolveModelRef"],
      "@anemll-qwen35/ir/mil": ["MilBuilder", "MilInterpreter", "readMlPackage"],
      "@anemll-qwen35/ir/chain": ["readChainManifest", "ChainStepper"],
      "@anemll-qwen35/generate": ["generate", "loadTokenizer"],
      "@anemll-qwen35/converter": ["convert"],
      "@anemll-qwen35/coreml": ["coreMLAvailability", "loadCoreMLAddon", "COMPUTE_UNITS"],
      "@anemll-qwen35/runtime-ane": ["ChainRunner", "referenceBackend", "coreMLBackend", "transferPerToken"],
      "@anemll-qwen35/runtime-mlx": ["loadMlxModel", "mlxAvailable"],
      "@anemll-qwen35/costplan": ["costplan"],
      "@anemll-qwen35/models": ["loadModel"],
      "@anemll-qwen35/server": ["createServer"],
      "@anemll-qwen35/bench": ["openAne"],
    };
    for (const e of entries) {
      const m = await import(e);
      for (const k of want[e] ?? []) if (!(k in m)) throw new Error(e + " does not export " + k);
    }
    const { mlxAvailable } = await import("@anemll-qwen35/runtime-mlx");
    console.log(JSON.stringify({ entries: entries.length, mlx: mlxAvailable() }));`;
  const imported = JSON.parse(run(process.execPath, ["--input-type=module", "-e", probe], { cwd: app }));
  if (mlx && !imported.mlx.available)
    throw new Error(`runtime-mlx installed but its addon did not load: ${imported.mlx.reason}`);

  step("the converter's k-means worker (its own file in the tarball) from the installed package");
  const kmeans = `
    import { palettize } from "@anemll-qwen35/converter";
    const w = new Float32Array(512 * 4096).map((_, i) => Math.round(Math.sin(i * 0.37) * 2000) / 65536);
    const a = await palettize(w, [512, 4096], { bits: 4, workers: 1 });
    const b = await palettize(w, [512, 4096], { bits: 4 }); // on the worker pool
    const same = (x, y) => Buffer.from(x.buffer, x.byteOffset, x.byteLength).equals(Buffer.from(y.buffer, y.byteOffset, y.byteLength));
    console.log(JSON.stringify({ same: same(a.indices, b.indices) && same(a.lut, b.lut) }));`;
  const pooled = JSON.parse(run(process.execPath, ["--input-type=module", "-e", kmeans], { cwd: app }));
  if (!pooled.same)
    throw new Error("the k-means pool of the installed converter gave other bytes than the main thread");

  step("the CLI from its bin: doctor, demo, doctor --selftest");
  const doctor = run("npx", ["--no-install", "anemll-qwen35", "doctor"], { cwd: app });
  if (!/reference\s+available/.test(doctor))
    throw new Error(`doctor did not list the reference backend:\n${doctor}`);
  const demo = run("npx", ["--no-install", "anemll-qwen35", "demo", "--max-tokens", "8"], { cwd: app });
  if (!/tok\/s/.test(demo)) throw new Error(`demo printed no tok/s:\n${demo}`);
  const selftest = run(
    "npx",
    [
      "--no-install",
      "anemll-qwen35",
      "doctor",
      "--selftest",
      "--steps",
      "1",
      "--out",
      join(work, "selftest.json"),
    ],
    { cwd: app },
  );
  if (!/\*\*\d+ ok, 0 failed/.test(selftest)) throw new Error(`the self-test did not pass:\n${selftest}`);

  step("the installed server: convert a chain (ctx 2048), serve it, a long prompt, a web page refused");
  const chain = join(work, "chain");
  run(
    join(app, "node_modules", ".bin", "anemll-qwen35"),
    [
      "convert",
      join(root, "fixtures", "tiny-tied"),
      "-o",
      chain,
      "--ctx",
      "2048",
      "--lut",
      "none",
      "--lmhead-lut",
      "none",
    ],
    { cwd: app },
  );
  const tokens = await serveInstalled(app, chain);
  step(`  a ${tokens}-token prompt answered; cross-origin and rebinding requests got 403`);

  step("type-checking a consumer of documented names against the published .d.ts");
  // one or more names of each package's index, each named in its published README's API section,
  // so that a documented export removed or changed fails here
  const consumerSource = `import { AnemllError, type Tensor, tensor } from "@anemll-qwen35/core";
import { type Qwen35Config, readQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { MilBuilder, type MlModel, tensorType } from "@anemll-qwen35/ir/mil";
import { type ChainManifest, readChainManifest } from "@anemll-qwen35/ir/chain";
import { type GenerationResult, loadTokenizer, type Tokenizer } from "@anemll-qwen35/generate";
import { convert } from "@anemll-qwen35/converter";
import { type ComputeUnits, coreMLAvailability } from "@anemll-qwen35/coreml";
import { ChainRunner, referenceBackend } from "@anemll-qwen35/runtime-ane";
import { mlxAvailable } from "@anemll-qwen35/runtime-mlx";
import { costplan } from "@anemll-qwen35/costplan";
import { type LoadedModel, loadModel } from "@anemll-qwen35/models";
import { createServer, type RequestLog } from "@anemll-qwen35/server";

export async function main(dir: string): Promise<GenerationResult> {
  await convert({ model: "hf:Qwen/Qwen3.5-0.8B", out: dir, ctx: 256 });
  const config: Qwen35Config = await readQwen35Config(\`\${dir}/config.json\`);
  const manifest: ChainManifest = await readChainManifest(dir);
  if (manifest.components.length === 0) throw new AnemllError("E_EMPTY", \`\${dir} has no components\`);
  const x: Tensor = tensor("f32", [1, config.hiddenSize]);
  const b = new MilBuilder();
  b.output("y", b.relu({ x: b.input("x", tensorType("fp32", [...x.shape])) }));
  const program: MlModel = b.model();
  await costplan(program);
  const runner = await ChainRunner.load(dir, { backend: referenceBackend({ precision: "fp16" }) });
  await runner.prefill([0]);
  await runner.dispose();
  const tokenizer: Tokenizer = await loadTokenizer(dir);
  const logs: RequestLog[] = [];
  const server = await createServer({ models: [{ name: "m", path: dir }], onRequestEnd: (l) => logs.push(l) });
  await server.close();
  const mlx: { available: boolean; reason?: string } = mlxAvailable();
  if (!mlx.available && mlx.reason === undefined) throw new AnemllError("E_MLX", "no reason given");
  const units: ComputeUnits = coreMLAvailability().available ? "cpuAndNeuralEngine" : "cpuOnly";
  const m: LoadedModel = await loadModel(dir, { backend: "auto", computeUnits: units });
  try {
    return await m.generate({ prompt: tokenizer.encode("Hi"), maxTokens: 8 });
  } finally {
    await m.dispose();
  }
}
`;
  const consumers = new Map([
    ["consumer.ts", consumerSource],
    [
      "bench.ts",
      `import { runScenario } from "@anemll-qwen35/bench";\nexport const smoke = () => runScenario("decode", { scale: "smoke" });\n`,
    ],
  ]);
  for (const [file, why] of UNCHECKED_CONSUMERS) {
    console.log(`  ${file} left out: ${why}`);
    consumers.delete(file);
  }
  for (const [file, source] of consumers) writeFileSync(join(app, file), source);
  const undocumented = [];
  for (const m of [...consumers.values()]
    .join("\n")
    .matchAll(/^import \{([^}]*)\} from "(@anemll-qwen35\/[a-z-]+)(\/[a-z]+)?";$/gm)) {
    const readme = join(app, "node_modules", ...m[2].split("/"), "README.md");
    const documented = documentedNames(readme) ?? new Set(readFileSync(readme, "utf8").match(/[\w$]+/g));
    for (const name of m[1].split(",").map((n) => n.trim().replace(/^type\s+/, "")))
      if (!documented.has(name)) undocumented.push(`${name} (${m[2]}${m[3] ?? ""})`);
  }
  if (undocumented.length)
    throw new Error(
      `the consumer uses names its packages' READMEs do not document: ${undocumented.join(", ")}`,
    );
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        noEmit: true,
        // bench's types name vega-lite's (vegaLiteSpec returns its TopLevelSpec), which need the DOM's
        lib: ["ES2023", "DOM"],
        types: ["node"],
        typeRoots: [join(root, "node_modules", "@types")],
      },
      files: [...consumers.keys()],
    }),
  );
  run(process.execPath, [join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "."], { cwd: app });

  step("generate on its own installs no protobufjs, zod or hub client");
  const small = consumer(
    "generate-only",
    tarballs.filter((t) => /anemll-qwen35-(core|generate)-\d/.test(t)),
    env,
  );
  for (const heavy of ["protobufjs", "zod", "@huggingface/hub", "@anemll-qwen35/ir"]) {
    if (existsSync(join(small, "node_modules", heavy))) throw new Error(`generate pulled in ${heavy}`);
  }
  run(process.execPath, ["--input-type=module", "-e", 'await import("@anemll-qwen35/generate")'], {
    cwd: small,
  });

  step("constrained decoding loads its engine (web-xgrammar's WebAssembly) from the installed tarball");
  const grammarProbe = `
    import { compileConstraint, loadTokenizer } from "@anemll-qwen35/generate";
    const tok = await loadTokenizer(${JSON.stringify(join(root, "fixtures", "tokenizer"))});
    const m = await compileConstraint(tok, { kind: "json_schema", schema: { enum: ["yes"] } });
    const quote = tok.encode('"')[0];
    const mask = await m.mask();
    if (((mask[quote >> 5] >>> (quote & 31)) & 1) !== 1) throw new Error("the mask refuses the opening quote");
    if (m.accept(tok.encode("{")[0])) throw new Error("the grammar took a {");
    m.dispose();`;
  run(process.execPath, ["--input-type=module", "-e", grammarProbe], { cwd: small });

  if (!process.argv.includes("--skip-publish")) {
    step("pnpm publish -r --dry-run");
    run("pnpm", ["publish", "-r", "--dry-run", "--no-git-checks"], { cwd: root });

    step("changeset version (in a scratch worktree)");
    const wt = join(work, "worktree");
    run("git", ["worktree", "add", "--detach", wt, "HEAD"], { cwd: root });
    try {
      writeFileSync(
        join(wt, ".changeset", "pack-install-check.md"),
        '---\n"@anemll-qwen35/core": patch\n---\n\nA check that versioning runs clean.\n',
      );
      run(join(root, "node_modules", ".bin", "changeset"), ["version"], { cwd: wt });
      const bumped = JSON.parse(readFileSync(join(wt, "packages", "core", "package.json"), "utf8")).version;
      const before = JSON.parse(readFileSync(join(root, "packages", "core", "package.json"), "utf8")).version;
      if (bumped === before)
        throw new Error(`changeset version did not bump @anemll-qwen35/core (${before})`);
    } finally {
      run("git", ["worktree", "remove", "--force", wt], { cwd: root });
    }
  }
  step(`ok: ${pkgs.length} packages installed and used from their tarballs`);
} finally {
  if (keep) console.log(`kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
}

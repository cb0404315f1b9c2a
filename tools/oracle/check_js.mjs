// Cross-check of the fixture tokenizer and chat template with the JavaScript libraries the
// project uses at run time (@huggingface/jinja, @huggingface/tokenizers).
//
// fixtures/tokenizer/chat_cases.json holds conversations rendered and encoded by Python
// (transformers + jinja2 + tokenizers). This script renders the same conversations with
// @huggingface/jinja and encodes them with @huggingface/tokenizers, and also encodes a few plain
// strings, and fails on any difference. The libraries are resolved from packages/generate, which
// depends on both; run `pnpm install` first.
//
// Usage: node tools/oracle/check_js.mjs [fixtures/tokenizer]

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "..", "..");
const dir = resolve(process.argv[2] ?? join(repo, "fixtures", "tokenizer"));

// Resolve the libraries the way packages/generate sees them.
const requireFromGenerate = createRequire(join(repo, "packages", "generate", "package.json"));
async function load(name) {
  try {
    // require.resolve may pick the CommonJS build; its exports then sit under `default`.
    const mod = await import(pathToFileURL(requireFromGenerate.resolve(name)).href);
    return mod.default ?? mod;
  } catch (err) {
    console.error(`check_js: cannot load ${name} from packages/generate (run pnpm install): ${err.message}`);
    process.exit(2);
  }
}
const { Template } = await load("@huggingface/jinja");
const { Tokenizer } = await load("@huggingface/tokenizers");

const readJson = (name) => JSON.parse(readFileSync(join(dir, name), "utf8"));
const tokenizer = new Tokenizer(readJson("tokenizer.json"), readJson("tokenizer_config.json"));
const template = new Template(readFileSync(join(dir, "chat_template.jinja"), "utf8"));
const { cases, probes = [] } = readJson("chat_cases.json");

let failed = 0;
let passed = 0;
function check(name, ok, detail) {
  if (ok) {
    passed++;
  } else {
    failed++;
    console.error(`FAIL ${name}: ${detail}`);
  }
}
const sameIds = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);

for (const c of cases) {
  const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt };
  if (c.tools) vars.tools = c.tools;
  if ("enable_thinking" in c) vars.enable_thinking = c.enable_thinking;
  const text = template.render(vars);
  check(
    `${c.name}: render`,
    text === c.expected_text,
    `\n--- js ---\n${text}\n--- python ---\n${c.expected_text}`,
  );
  const ids = tokenizer.encode(c.expected_text, { add_special_tokens: false }).ids;
  check(`${c.name}: encode`, sameIds(ids, c.expected_ids), `js ${JSON.stringify(ids)}`);
  const back = tokenizer.decode(ids, { skip_special_tokens: false });
  check(`${c.name}: decode`, back === c.expected_text, `js decoded ${JSON.stringify(back)}`);
}

// Plain-text probes: byte fallback through the ByteLevel alphabet, NFC, combining marks, digits.
for (const p of probes) {
  const ids = tokenizer.encode(p.text, { add_special_tokens: false }).ids;
  check(
    `probe ${JSON.stringify(p.text)}: encode`,
    sameIds(ids, p.ids),
    `js ${JSON.stringify(ids)} python ${JSON.stringify(p.ids)}`,
  );
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

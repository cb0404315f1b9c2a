// Copies the tiny fixture model into dist/fixture so that `anemll-qwen35 demo` works from an
// installed package too (about 5 MB; no golden outputs, only what a conversion needs).
import { cpSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(pkg, "..", "..", "fixtures", "tiny-tied");
const dst = join(pkg, "dist", "fixture", "tiny-tied");
if (!existsSync(src)) {
  console.log("cli: fixtures/tiny-tied not found; the demo will need --model");
  process.exit(0);
}
rmSync(dst, { recursive: true, force: true });
mkdirSync(dst, { recursive: true });
for (const f of [
  "config.json",
  "generation_config.json",
  "model.safetensors.index.json",
  "model.safetensors-00001-of-00002.safetensors",
  "model.safetensors-00002-of-00002.safetensors",
  "tokenizer.json",
  "tokenizer_config.json",
  "chat_template.jinja",
]) {
  if (existsSync(join(src, f))) cpSync(join(src, f), join(dst, f));
}

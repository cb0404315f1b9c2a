// Copies the demo's model (fixtures/tiny-trained, a tiny Qwen3.5 trained on the King James Bible)
// into dist/fixture so that `anemll-qwen35 demo` works from an installed package too (about 17 MB;
// no golden outputs or training records, only what a conversion needs).
import { cpSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(pkg, "..", "..", "fixtures", "tiny-trained");
const dst = join(pkg, "dist", "fixture", "tiny-trained");
if (!existsSync(src)) {
  console.log("cli: fixtures/tiny-trained not found; the demo will need --model");
  process.exit(0);
}
rmSync(join(pkg, "dist", "fixture"), { recursive: true, force: true }); // also drops an older bundled model
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

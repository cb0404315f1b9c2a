/**
 * Worker thread of prompt-tokenizer.ts: rebuilds a served model's tokenizer from its definition and
 * encodes one prompt per message. Plain JavaScript, so the same file runs from the sources (tests)
 * and from dist/ without a TypeScript loader; @anemll-qwen35/generate resolves to its built dist.
 */
import { parentPort, workerData } from "node:worker_threads";
import { Tokenizer } from "@anemll-qwen35/generate";

const { tokenizerJson, tokenizerConfig, options } = workerData;
const tokenizer = Tokenizer.fromJSON(tokenizerJson, tokenizerConfig, options);

parentPort.on("message", (job) => {
  try {
    const ids =
      job.kind === "chat" ? tokenizer.encodeChat(job.messages, job.options).ids : tokenizer.encode(job.text);
    const out = Int32Array.from(ids);
    parentPort.postMessage({ ids: out }, [out.buffer]);
  } catch (err) {
    parentPort.postMessage({ error: { code: err?.code, message: err?.message ?? String(err) } });
  }
});
parentPort.postMessage({ ready: true });

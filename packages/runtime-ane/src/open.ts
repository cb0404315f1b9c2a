/**
 * openChain(): the one call an app needs — a converted chain on a backend, plus its tokenizer,
 * ready for generate().
 */

import { AnemllError } from "@anemll-qwen35/core";
import { loadTokenizer, type Tokenizer } from "@anemll-qwen35/generate";
import type { Backend, BackendName } from "./backend.js";
import { ChainRunner, type LoadChainOptions } from "./chain-runner.js";
import { type CoreMLBackendOptions, coreMLBackend } from "./coreml-backend.js";
import { type ReferenceBackendOptions, referenceBackend } from "./reference-backend.js";

export interface OpenChainOptions
  extends Omit<LoadChainOptions, "backend">,
    ReferenceBackendOptions,
    CoreMLBackendOptions {
  /** "coreml" (Core ML on the ANE, macOS 15+) or "reference" (the MIL interpreter, any OS). */
  backend?: BackendName | Backend;
}

export class UnknownBackendError extends AnemllError {
  constructor(name: string) {
    super("E_UNKNOWN_BACKEND", `unknown backend "${name}": expected "coreml" or "reference"`);
  }
}

export function createBackend(name: BackendName | Backend, options: OpenChainOptions = {}): Backend {
  if (typeof name === "object") return name;
  if (name === "reference") return referenceBackend(options);
  if (name === "coreml") return coreMLBackend(options);
  throw new UnknownBackendError(String(name));
}

export interface OpenedChain {
  readonly model: ChainRunner;
  readonly tokenizer: Tokenizer;
}

export async function openChain(dir: string, options: OpenChainOptions = {}): Promise<OpenedChain> {
  const backend = createBackend(options.backend ?? "reference", options);
  const model = await ChainRunner.load(dir, { ...options, backend });
  try {
    const tokenizer = await loadTokenizer(dir, { eosTokenIds: model.manifest.tokenizer.eosTokenIds });
    return { model, tokenizer };
  } catch (err) {
    model.dispose();
    throw err;
  }
}

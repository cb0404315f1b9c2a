/**
 * Bytes per decode token that cross between JS and a backend, from model.json alone: what the
 * state plan lets through (host inputs and outputs only) and, for comparison, what crossed when
 * the host held every state buffer and fed it back each step. `bench/transfer-bytes.ts` prints
 * both beside the backends' own counters.
 */
import type { ChainManifest, IoDType, IoTensor } from "@anemll-qwen35/ir/chain";
import { hostInputs, hostOutputs } from "@anemll-qwen35/ir/chain";

const BYTES: Record<IoDType, number> = { fp16: 2, fp32: 4, int32: 4 };

const numel = (t: IoTensor) => t.shape.reduce((a, b) => a * b, 1);

export interface TransferEstimate {
  /** JS → backend per token. */
  readonly bytesIn: number;
  /** Backend → JS per token. */
  readonly bytesOut: number;
  /** Copied inside the backend per token to keep state (KV rows into its caches; 0 when the host keeps them). */
  readonly bytesKept: number;
}

/**
 * Per decode token through every component the backend runs (super-blocks and lm_head: the
 * embedding row is read on the host, in its declared dtype), for a backend that returns outputs
 * with `outputBytes` bytes per element (the reference backend: 4, it returns fp32; Core ML: the
 * declared dtype, `undefined`). A tensor a backend returned goes back in as it came out.
 */
export function transferPerToken(
  manifest: ChainManifest,
  mode: "backend-keeps-state" | "host-keeps-state",
  outputBytes?: number,
): TransferEstimate {
  const out = (t: IoTensor) => numel(t) * (outputBytes ?? BYTES[t.dtype]);
  let bytesIn = 0;
  let bytesOut = 0;
  let bytesKept = 0;
  let fromHost = true; // the first super-block's hidden state is the host's embedding row
  for (const c of manifest.components) {
    const io = c.io;
    if (c.kind === "embed") continue;
    const fed = mode === "backend-keeps-state" ? hostInputs(io) : io.inputs;
    for (const t of fed) {
      const k = t.role.kind;
      // hidden state and carried GDN states are a backend's outputs fed back; caches and masks are the host's
      const returned = (k === "hidden_in" && !fromHost) || k === "gdn_conv_in" || k === "gdn_rec_in";
      bytesIn += returned ? out(t) : numel(t) * BYTES[t.dtype];
    }
    fromHost = false;
    const back = mode === "backend-keeps-state" ? hostOutputs(io) : io.outputs;
    for (const t of back) bytesOut += out(t);
    if (mode === "host-keeps-state") continue; // the host wrote the KV rows itself
    for (const t of io.outputs) {
      const role = t.role;
      if (role.kind !== "kv_new") continue;
      const cache = io.inputs.find((i) => i.name === role.cache);
      bytesKept += numel(t) * BYTES[cache?.dtype ?? t.dtype];
    }
  }
  return { bytesIn, bytesOut, bytesKept };
}

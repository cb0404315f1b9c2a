/**
 * The MTP head of a chain (model.json's speculative.mtp) as a runner drives it: one position a
 * call, its own KV cache kept by the component's state. The pair (hidden_t, token t+1) runs at
 * RoPE position t and writes cache row t — ring rows past the context (ringRow), where a draft's
 * provisional rows may replace old entries the window still holds: that changes only how well the
 * head drafts, never what the verified output is.
 */
import { type Tensor, tensor } from "@anemll-qwen35/core";
import type { ChainComponentState } from "./component-state.js";
import { ChainProtocolError, type IoTensor, ringMask, ringRow } from "./contract.js";
import { type ChainComponent, floatTensor } from "./protocol.js";
import { ropeCosSin } from "./rope.js";
import { hostInputs, statePlan } from "./state.js";

export class MtpHead {
  private readonly c: ChainComponent;
  private readonly inputs: readonly IoTensor[];
  private readonly out: IoTensor;
  private readonly sinks: number;
  readonly state: ChainComponentState;

  /** `sinks`: the ring's attention sinks (its rows past the context; 0 when the chain has no ring). */
  constructor(c: ChainComponent, sinks = 0) {
    this.c = c;
    this.inputs = hostInputs(c.io);
    const out = c.io.outputs.find((t) => t.role.kind === "hidden_out");
    if (!out) throw new ChainProtocolError(c.name, "no output has the role hidden_out");
    this.out = out;
    this.sinks = sinks;
    this.state = c.newState(statePlan(c.name, c.io));
  }

  /**
   * One head step at `position`: `hidden` [1, D, 1, 1] is the trunk's pre-norm state (normed = 0)
   * or the head's own last output (normed = 1), `embedded` the embedding of the token after it.
   * Returns hidden_out [1, D, 1, 1] (after mtp.norm), for the lm_head's verify function.
   */
  async step(hidden: Tensor, embedded: Tensor, normed: 0 | 1, position: number): Promise<Tensor> {
    const ctx = this.c.io.ctx;
    const feeds: Record<string, Tensor> = {};
    for (const t of this.inputs) {
      const role = t.role;
      if (role.kind === "hidden_in") feeds[t.name] = hidden;
      else if (role.kind === "embedding") feeds[t.name] = embedded;
      else if (role.kind === "normed") feeds[t.name] = floatTensor(t, Float32Array.of(normed));
      else if (role.kind === "rope") {
        const { cos, sin } = ropeCosSin(role, [position]);
        feeds[t.name] = floatTensor(t, role.part === "cos" ? cos : sin);
      } else if (role.kind === "mask")
        feeds[t.name] = floatTensor(t, ringMask(role.rule, ctx, this.sinks, position));
      else if (role.kind === "position") feeds[t.name] = tensor("i32", t.shape, Int32Array.of(position));
      else
        throw new ChainProtocolError(
          this.c.name,
          `input ${t.name} (role ${role.kind}) is not the host's to feed`,
        );
    }
    const r = await this.c.predict(feeds, this.state, ringRow(ctx, this.sinks, position));
    const v = r[this.out.name];
    if (!v) throw new ChainProtocolError(this.c.name, `the package did not return output ${this.out.name}`);
    return v;
  }
}

/**
 * States (iOS18): read_state returns the state's current tensor; write_state replaces it and
 * has no outputs. Sources: coremltools ops/defs/iOS18/states.py (read_state) and
 * coreml_dialect/ops.py (coreml_update_state, serialised as write_state + read_state).
 */
import { sameType, typeToString } from "../program.js";
import type { OpArgs, OpDef } from "./opdef.js";

function wrapped(a: OpArgs) {
  const t = a.info("input").type;
  if (t.kind !== "state") a.fail("input", `must be a state, got ${typeToString(t)}`);
  return t.wrapped;
}

const readState: OpDef = {
  type: "read_state",
  version: "iOS18",
  view: true,
  params: [{ name: "input", state: true }],
  infer: (a) => [wrapped(a)],
  evaluate: (a, _out, ctx) => [ctx.readState(a.varName("input"))],
};

const writeState: OpDef = {
  type: "write_state",
  version: "iOS18",
  outputs: "none",
  params: [{ name: "input", state: true }, { name: "data" }],
  infer(a) {
    const w = wrapped(a);
    const d = a.type("data");
    if (!sameType(w, d))
      a.fail("data", `must be the state's type ${typeToString(w)}, got ${typeToString(d)}`);
    return [];
  },
  evaluate(a, _out, ctx) {
    ctx.writeState(a.varName("input"), a.value("data"));
    return [];
  },
};

export const STATE_OPS: readonly OpDef[] = [readState, writeState];

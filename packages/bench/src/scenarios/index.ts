/** Every scenario by name. */
import type { Scenario } from "../scenario.js";
import type { ScenarioName } from "../schema.js";
import { agent } from "./agent.js";
import { ctxSweep } from "./ctx-sweep.js";
import { decode } from "./decode.js";
import { expertSkip } from "./expert-skip.js";
import { fp32Islands } from "./fp32-islands.js";
import { fusionSweep } from "./fusion-sweep.js";
import { handoff } from "./handoff.js";
import { kvExpand } from "./kv-expand.js";
import { pairing } from "./pairing.js";
import { parallel } from "./parallel.js";
import { power } from "./power.js";
import { prefill } from "./prefill.js";
import { speculative } from "./speculative.js";
import { split } from "./split.js";

export const scenarios: Readonly<Record<ScenarioName, Scenario>> = {
  decode,
  prefill,
  "ctx-sweep": ctxSweep,
  "fusion-sweep": fusionSweep,
  parallel,
  handoff,
  speculative,
  power,
  pairing,
  split,
  "expert-skip": expertSkip,
  "fp32-islands": fp32Islands,
  "kv-expand": kvExpand,
  agent,
};

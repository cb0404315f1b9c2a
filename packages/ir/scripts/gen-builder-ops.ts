/** Regenerates src/mil/builder-ops.gen.ts from the op registry: `pnpm --filter @anemll-qwen35/ir gen:builder`. */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { MIL_OPS } from "../src/mil/ops/index.js";
import { builderOpsSource } from "./builder-ops-source.js";

const out = fileURLToPath(new URL("../src/mil/builder-ops.gen.ts", import.meta.url));
writeFileSync(out, builderOpsSource(MIL_OPS.values()));
console.log(`wrote ${out} (${MIL_OPS.size - 1} ops)`);

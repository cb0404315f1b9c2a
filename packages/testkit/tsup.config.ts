import { packageBuild } from "../../tsup.base.ts";

export default packageBuild({
  entry: ["src/index.ts", "src/temp.ts", "src/timing.ts"],
  external: ["vitest"],
});

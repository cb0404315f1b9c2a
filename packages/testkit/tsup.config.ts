import { packageBuild } from "../../tsup.base.ts";

export default packageBuild({ entry: ["src/index.ts", "src/temp.ts"], external: ["vitest"] });

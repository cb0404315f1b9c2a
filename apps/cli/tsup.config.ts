import { packageBuild } from "../../tsup.base.ts";

export default packageBuild({
  entry: ["src/cli.ts"],
  dts: false,
  banner: { js: "#!/usr/bin/env node" },
});

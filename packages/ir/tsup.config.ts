import { packageBuild } from "../../tsup.base.ts";

export default packageBuild({
  entry: {
    checkpoint: "src/checkpoint/index.ts",
    mil: "src/mil/index.ts",
    chain: "src/chain/index.ts",
  },
});

import { packageBuild } from "../../tsup.base.ts";

export default packageBuild({
  entry: {
    index: "src/index.ts",
    graph: "src/graph/index.ts",
    // its own entry: kmeans-pool.ts starts dist/kmeans-worker.js
    "kmeans-worker": "src/quant/kmeans-worker.ts",
  },
});

import { packageBuild } from "../../tsup.base.ts";

// the k-means worker is its own entry: kmeans-pool.ts starts dist/kmeans-worker.js
export default packageBuild({ entry: ["src/index.ts", "src/kmeans-worker.ts"] });

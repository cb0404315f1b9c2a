/**
 * A launcher of the distributed tests, as its own process (so that a test can kill it): starts
 * argv[2] ranks of rank.ts on 127.0.0.1 with the job in argv[3] and passes their lines through as
 * "[rank] line".
 */
import { fileURLToPath } from "node:url";
import { hostsFromList, launchRing } from "../../src/index.js";
import { freePortBlock } from "./ranks.js";

const RANK_SCRIPT = fileURLToPath(new URL("./rank.ts", import.meta.url));
const size = Number(process.argv[2]);
launchRing({
  hostfile: hostsFromList("127.0.0.1", size),
  command: [process.execPath, "--conditions=source", "--import", "tsx", RANK_SCRIPT, process.argv[3]],
  ring: { startingPort: await freePortBlock(size) },
  onOutput: (rank, _stream, line) => console.log(`[${rank}] ${line}`),
});

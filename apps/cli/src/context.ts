import type { Output, Streams } from "./output.js";

/** What every command gets: output sinks honouring the global --json flag. */
export interface Context {
  output(): Output;
  readonly streams: Streams;
}

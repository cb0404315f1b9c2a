/** Helpers for the checkpoint tests (the shared ones come from the private testkit). */
export { listDir, tempDir, tinyConfigJson, writeTokenizerFiles } from "../testkit.js";

/** A tensor's values as a plain array (numbers; bigints for i64). */
export const vals = (t: { data: ArrayLike<number> | ArrayLike<bigint> }): (number | bigint)[] =>
  Array.from(t.data as ArrayLike<number | bigint>);

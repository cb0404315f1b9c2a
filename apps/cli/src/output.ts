import { writeFileAtomic } from "@anemll-qwen35/ir/checkpoint";

/**
 * Where commands write: human text to stdout, or one JSON document with --json. Tests pass their
 * own sinks to capture both.
 */
export interface Output {
  readonly json: boolean;
  /** A line for people (suppressed with --json). */
  line(text?: string): void;
  /** Streamed text without a newline (suppressed with --json). */
  write(text: string): void;
  /** The machine-readable result (printed only with --json). */
  result(value: unknown): void;
  /** Notices and progress: always to stderr so stdout stays clean for pipes. */
  notice(text: string): void;
}

export interface Streams {
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
}

export function makeOutput(json: boolean, streams: Streams): Output {
  return {
    json,
    line: (text = "") => {
      if (!json) streams.stdout.write(`${text}\n`);
    },
    write: (text) => {
      if (!json) streams.stdout.write(text);
    },
    result: (value) => {
      if (json) streams.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
    },
    notice: (text) => {
      streams.stderr.write(`${text}\n`);
    },
  };
}

/** A report's JSON written to `file` (--save), atomically; nothing when no file was asked for. */
export async function saveJson(file: string | undefined, value: unknown): Promise<void> {
  if (file) await writeFileAtomic(file, `${JSON.stringify(value, null, 2)}\n`);
}

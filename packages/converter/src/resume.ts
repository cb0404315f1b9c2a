/**
 * Finished tensors of the package being built, kept across an interruption so that `--resume`
 * does not redo them (a 9B super-block package is ~15 minutes of k-means).
 *
 * No second copy of the weights is written: the package's own weight file is the store. While a
 * package is built, a journal in `<out>.partial/.resume/` gets one line per finished k-means
 * weight — its key (tensor, rows, encoding, a checksum of the stored values), where its blobs sit
 * in the weight file and a CRC-32 of each. When the conversion is interrupted, the weight file is
 * moved next to the journal (after a crash it is still in the package's temporary folder). On
 * resume, a weight whose key matches is read back from there, its checksums verified, and used
 * instead of being recomputed; the new package is written in full as before, so its bytes are
 * the same as those of an uninterrupted conversion. Each resumed attempt is a new generation;
 * every generation of a package is deleted once the package is complete.
 */
import { existsSync } from "node:fs";
import { appendFile, mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { crc32 } from "node:zlib";
import { f32ToF16Bits } from "@anemll-qwen35/core";
import {
  BlobReader,
  type BlobRef,
  type BlobSink,
  type MilData,
  type MilDType,
  type MlPackageWriter,
  tensorType,
} from "@anemll-qwen35/ir/mil";
import type { EncodedWeightStore } from "./graph/weights.js";
import type { EncodedWeight } from "./quant/encode.js";

const RESUME_DIR = ".resume";

interface JournalHeader {
  readonly component: string;
  readonly key: string;
  /** Where the weight file is moved when the conversion is interrupted (relative to .resume). */
  readonly weights: string;
  /** The weight file while the package is being built (relative to the .partial folder). */
  readonly building: string;
}

interface JournalBlob {
  readonly offset: number;
  readonly dtype: MilDType;
  readonly shape: readonly number[];
  readonly crc32: number;
}

interface JournalEntry {
  readonly key: string;
  readonly name: string;
  readonly weight: Omit<Extract<EncodedWeight, { kind: "lut" }>, "indices" | "lut">;
  /** The op's constants in order: indices, then the LUT. */
  readonly blobs: readonly JournalBlob[];
}

interface Generation {
  readonly header: JournalHeader;
  readonly entries: Map<string, JournalEntry>;
  reader?: BlobReader;
}

const bytesOf = (d: MilData) => {
  const v = d as Exclude<MilData, string[]>;
  return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
};

export class TensorJournal implements EncodedWeightStore {
  private readonly partial: string;
  private readonly component: string;
  private readonly older: Generation[];
  private readonly journalPath: string;
  private readonly header: JournalHeader;
  private readonly refs = new WeakMap<object, BlobRef>();
  private lines: Promise<void> = Promise.resolve();
  /** Names of the weights reused from an earlier attempt. */
  readonly reused: string[] = [];
  /** Weights recorded in this attempt (reused ones included: they are in its weight file too). */
  recorded = 0;

  private constructor(
    partial: string,
    component: string,
    older: Generation[],
    gen: number,
    key: string,
    building: string,
  ) {
    this.partial = partial;
    this.component = component;
    this.older = older;
    this.journalPath = join(partial, RESUME_DIR, `${component}.${gen}.jsonl`);
    this.header = { component, key, weights: `${component}.${gen}.bin`, building };
  }

  /**
   * Starts the journal of `component` (build key `key`) for the package `writer` is writing;
   * with `resume`, earlier attempts with the same key become the source of reused weights.
   */
  static async open(
    partial: string,
    component: string,
    key: string,
    writer: MlPackageWriter,
    resume: boolean,
  ): Promise<TensorJournal> {
    const dir = join(partial, RESUME_DIR);
    await mkdir(dir, { recursive: true });
    const generations = await readGenerations(partial, component);
    const usable = resume ? generations.filter((g) => g.generation.header.key === key) : [];
    const gen = generations.reduce((m, g) => Math.max(m, g.gen), 0) + 1;
    const j = new TensorJournal(
      partial,
      component,
      usable.map((g) => g.generation).reverse(),
      gen,
      key,
      relative(partial, writer.weightFile),
    );
    await writeFile(j.journalPath, `${JSON.stringify(j.header)}\n`);
    return j;
  }

  /** The sink to build with: `writer`'s, remembering which blob holds which constant. */
  sink(inner: BlobSink): BlobSink {
    return {
      write: (type, data) => {
        const ref = inner.write(type, data);
        if (typeof data === "object") this.refs.set(data, ref);
        return ref;
      },
    };
  }

  async reuse(key: string): Promise<EncodedWeight | undefined> {
    for (const g of this.older) {
      const e = g.entries.get(key);
      if (!e) continue;
      const reader = this.readerOf(g);
      if (!reader) continue;
      try {
        const data = e.blobs.map((b) => {
          const d = reader.read(b.offset, tensorType(b.dtype, b.shape), `${e.name} (resumed)`);
          if (crc32(bytesOf(d)) !== b.crc32) throw new Error("checksum mismatch");
          return d;
        });
        const [indices, lut] = data;
        this.reused.push(e.name);
        return {
          ...e.weight,
          indices: indices as Uint8Array,
          lut: lut instanceof Uint16Array ? lut : Uint16Array.from(lut as Float32Array, f32ToF16Bits),
        };
      } catch {
        // damaged or incomplete (a crash before the write finished): try an older copy, else recompute
      }
    }
    return undefined;
  }

  finished(key: string, name: string, weight: EncodedWeight, data: readonly MilData[]): void {
    if (weight.kind !== "lut") return;
    const blobs: JournalBlob[] = [];
    for (const d of data) {
      const ref = this.refs.get(d as object);
      if (!ref) return; // not streamed to the weight file (no sink): nothing to keep
      const v = d as Exclude<MilData, string[]>;
      blobs.push({
        offset: ref.offset,
        dtype:
          d instanceof Uint8Array
            ? (`uint${weight.bits}` as MilDType)
            : d instanceof Uint16Array
              ? "fp16"
              : "fp32",
        shape: d === data[0] ? weight.shape : weight.lutShape,
        crc32: crc32(bytesOf(v)),
      });
    }
    const { indices: _i, lut: _l, ...meta } = weight;
    const entry: JournalEntry = { key, name, weight: meta, blobs };
    this.recorded++;
    const line = `${JSON.stringify(entry)}\n`;
    this.lines = this.lines.then(() => appendFile(this.journalPath, line));
  }

  /** Interrupted: keeps the weight file written so far next to the journal. */
  async keep(writer: MlPackageWriter): Promise<void> {
    await this.lines;
    await writer.flush();
    await rename(writer.weightFile, join(this.partial, RESUME_DIR, this.header.weights));
    this.close();
  }

  /** The package is complete (or failed for another reason): forgets every attempt at it. */
  async discard(): Promise<void> {
    await this.lines.catch(() => {});
    this.close();
    for (const g of await readGenerations(this.partial, this.component)) {
      await rm(g.journal, { force: true });
      await rm(join(this.partial, RESUME_DIR, g.generation.header.weights), { force: true });
      // the temporary package of an attempt that crashed
      const building = join(this.partial, g.generation.header.building);
      const tmp = packageDirOf(this.partial, building);
      if (tmp && tmp !== packageDirOf(this.partial, join(this.partial, this.header.building))) {
        await rm(tmp, { recursive: true, force: true });
      }
    }
  }

  private close(): void {
    for (const g of this.older) {
      g.reader?.close();
      g.reader = undefined;
    }
  }

  private readerOf(g: Generation): BlobReader | undefined {
    if (g.reader) return g.reader;
    for (const path of [
      join(this.partial, RESUME_DIR, g.header.weights),
      join(this.partial, g.header.building),
    ]) {
      if (!existsSync(path)) continue;
      try {
        g.reader = BlobReader.open(path);
        return g.reader;
      } catch {
        // unreadable: try the other location
      }
    }
    return undefined;
  }
}

/** The top folder of a temporary package inside `partial` holding `file`. */
function packageDirOf(partial: string, file: string): string | undefined {
  let dir = dirname(file);
  while (dirname(dir) !== partial && dir !== dirname(dir)) dir = dirname(dir);
  return dirname(dir) === partial ? dir : undefined;
}

async function readGenerations(
  partial: string,
  component: string,
): Promise<{ gen: number; journal: string; generation: Generation }[]> {
  const dir = join(partial, RESUME_DIR);
  const out: { gen: number; journal: string; generation: Generation }[] = [];
  let files: string[];
  try {
    files = await readdir(dir);
  } catch {
    return out;
  }
  for (const f of files) {
    const m = /^(.+)\.(\d+)\.jsonl$/.exec(f);
    if (!m || m[1] !== component) continue;
    const journal = join(dir, f);
    const lines = (await readFile(journal, "utf8")).split("\n");
    let header: JournalHeader;
    try {
      header = JSON.parse(lines[0]) as JournalHeader;
    } catch {
      continue;
    }
    const entries = new Map<string, JournalEntry>();
    for (const line of lines.slice(1)) {
      try {
        const e = JSON.parse(line) as JournalEntry;
        entries.set(e.key, e);
      } catch {
        // a line cut short by a crash, or the empty last line
      }
    }
    out.push({ gen: Number(m[2]), journal, generation: { header, entries } });
  }
  return out.sort((a, b) => a.gen - b.gen);
}

/** Removes the resume folder (the conversion is complete). */
export async function removeResumeFolder(partial: string): Promise<void> {
  await rm(join(partial, RESUME_DIR), { recursive: true, force: true });
}

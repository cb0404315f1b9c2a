import { AnemllError } from "@anemll-qwen35/core";

/** Why a weight file was refused; one value per check the blob reader makes. */
export type BlobErrorReason =
  | "header" // missing/truncated storage header or version != 2
  | "offset" // metadata or payload outside the file, or overlapping the header
  | "sentinel" // metadata record does not start with 0xDEADBEEF
  | "dtype" // blob dtype code differs from the requested MIL dtype, or is unknown
  | "padding" // padding_size_in_bits >= 8, or set on a whole-byte dtype
  | "size" // sizeInBytes disagrees with the element count of the requested type
  | "io"; // the file could not be opened or read

/** A MIL weight file (blob storage v2) is malformed or disagrees with the value that points into it. */
export class BlobFormatError extends AnemllError {
  readonly reason: BlobErrorReason;
  /** The weight file on disk. */
  readonly file: string;
  /** Byte offset of the record concerned (metadata offset for blob errors; 0 for the header). */
  readonly offset: number;
  constructor(
    reason: BlobErrorReason,
    file: string,
    offset: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super("E_BLOB_FORMAT", `${file} @ ${offset}: ${message}`, options);
    this.reason = reason;
    this.file = file;
    this.offset = offset;
  }
}

/** A protobuf message could not be decoded, or holds something this project cannot represent. */
export class MilFormatError extends AnemllError {
  /** Where in the program, e.g. `function main / op linear_0 / input x`. */
  readonly where: string;
  constructor(where: string, message: string, options?: { cause?: unknown }) {
    super("E_MIL_FORMAT", where ? `${where}: ${message}` : message, options);
    this.where = where;
  }
}

/** Why a .mlpackage was refused. */
export type MlPackageErrorReason =
  | "path" // destination/source path unusable (not *.mlpackage, not a directory, ...)
  | "manifest" // Manifest.json missing or malformed
  | "item" // a manifest item is incomplete or points at a missing file
  | "root" // rootModelIdentifier missing or naming no item
  | "model" // model.mlmodel unreadable or not a protobuf Model
  | "not-ml-program" // the Model is not an ML Program (mlProgram unset)
  | "program" // the ML Program holds something unsupported or inconsistent
  | "io-type" // a model input/output/state has a type Core ML cannot describe
  | "description" // ModelDescription disagrees with the program
  | "blob" // a blob reference cannot be resolved or belongs to another weight file
  | "write"; // writing the package failed

/** A .mlpackage is malformed, or a model cannot be written as one. */
export class MlPackageError extends AnemllError {
  readonly reason: MlPackageErrorReason;
  /** The package directory (or the file inside it that is concerned). */
  readonly path: string;
  /** The item concerned: a manifest entry id, a file inside the package, or a feature name. */
  readonly item: string | undefined;
  constructor(
    reason: MlPackageErrorReason,
    path: string,
    item: string | undefined,
    message: string,
    options?: { cause?: unknown },
  ) {
    super("E_MLPACKAGE", `${path}${item ? ` [${item}]` : ""}: ${message}`, options);
    this.reason = reason;
    this.path = path;
    this.item = item;
  }
}

/**
 * The ModelDescription stored in a package disagrees with the program it describes (a check
 * coremltools does not make): names the feature and the field that differs.
 */
export class DescriptionMismatchError extends MlPackageError {
  /** "input" | "output" | "state" feature name, or the function for count mismatches. */
  readonly feature: string;
  /** What disagrees: "count", "name", "kind", "shape", "dtype", "function". */
  readonly field: string;
  constructor(path: string, feature: string, field: string, message: string) {
    super("description", path, feature, message);
    this.feature = feature;
    this.field = field;
  }
}

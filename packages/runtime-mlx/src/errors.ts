/**
 * Errors of the MLX layer. All extend the project's AnemllError (a stable `code` plus a message that
 * says what to fix); RuntimeMlxError is the common base of this package's errors.
 */
import { AnemllError } from "@anemll-qwen35/core";

export class RuntimeMlxError extends AnemllError {}

/** MLX itself rejected an operation (bad shapes, dtypes, files, ...); `message` is MLX's own text. */
export class MlxError extends RuntimeMlxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_MLX", message, options);
  }
}

/** An MxArray was used after `dispose()` (or after the `tidy` scope that owned it ended). */
export class MlxDisposedError extends MlxError {
  override readonly code = "E_MLX_DISPOSED";
}

/** The native addon cannot be used here; `reason` says why and the message says how to fix it. */
export class MlxUnavailableError extends RuntimeMlxError {
  readonly reason: string;
  constructor(reason: string, fix: string, options?: { cause?: unknown }) {
    super("E_MLX_UNAVAILABLE", `MLX is unavailable: ${reason}. ${fix}`, options);
    this.reason = reason;
  }
}

/** A model was used after `dispose()`. */
export class ModelDisposedError extends RuntimeMlxError {
  constructor(what: string) {
    super("E_MODEL_DISPOSED", `${what}: the model has been disposed; load it again`);
  }
}

/** A checkpoint this runtime cannot load as asked (format, quantization, options); names what and why. */
export class MlxModelLoadError extends RuntimeMlxError {
  readonly file: string | undefined;
  constructor(file: string | undefined, message: string, options?: { cause?: unknown }) {
    super("E_MLX_MODEL_LOAD", file ? `${file}: ${message}` : message, options);
    this.file = file;
  }
}

/**
 * Running a model across processes went wrong: the group could not form (a rank never joined, MLX
 * lacks the backend, no MLX_RANK/MLX_HOSTFILE), the ranks disagree (different model or options),
 * or a peer stopped answering. `code` tells which:
 * E_MLX_DIST_SETUP | E_MLX_DIST_JOIN | E_MLX_DIST_MISMATCH | E_MLX_DIST_PEER.
 */
export class DistributedError extends RuntimeMlxError {}

/** A hostfile (MLX's launcher format, or the ring backend's MLX_HOSTFILE) is missing or malformed. */
export class HostfileError extends RuntimeMlxError {
  readonly file: string;
  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super("E_MLX_HOSTFILE", `${file}: ${message}`, options);
    this.file = file;
  }
}

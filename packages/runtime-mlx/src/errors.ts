/**
 * Errors of the MLX layer. They mirror the project's AnemllError shape (a stable `code` plus a message
 * that says what to do); runtime-mlx does not depend on other workspace packages yet, so the base class
 * lives here.
 */
export class RuntimeMlxError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

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

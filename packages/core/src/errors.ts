/**
 * Typed errors. Every error a user can cause carries a stable `code` and names the place
 * (file, tensor, field, op) so that the message alone says what to fix.
 */
export class AnemllError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A value was outside what a function accepts (wrong dtype, bad shape, bad argument). */
export class InvalidArgumentError extends AnemllError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("E_INVALID_ARGUMENT", message, options);
  }
}

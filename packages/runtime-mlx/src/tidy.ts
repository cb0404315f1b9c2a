/**
 * Deterministic release of MxArrays.
 *
 * `tidy(fn)` records every array created while `fn` runs (sync, or async until its promise settles)
 * and disposes those not reachable from its return value. Scopes follow the async context
 * (AsyncLocalStorage), so concurrent async tidies do not steal each other's arrays. Arrays that
 * survive a nested scope move to the enclosing one. `keep(x)` exempts arrays from every open scope
 * (model weights, caches stored outside the return value).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { isMxArray, type MxArray } from "./native.js";

interface Scope {
  readonly arrays: Set<MxArray>;
  readonly parent: Scope | undefined;
  closed: boolean;
}

const scopes = new AsyncLocalStorage<Scope>();

/** Records a freshly created array (or list of arrays) in the current scope; returns it unchanged. */
export function track<T extends MxArray | MxArray[]>(value: T): T {
  const scope = scopes.getStore();
  if (scope !== undefined && !scope.closed) {
    if (Array.isArray(value)) {
      for (const a of value) scope.arrays.add(a);
    } else {
      scope.arrays.add(value as MxArray);
    }
  }
  return value;
}

/** Every MxArray inside `value` (arrays, plain objects, Maps, Sets; cycles are fine). */
export function collectArrays(
  value: unknown,
  into: Set<MxArray> = new Set(),
  seen = new Set<object>(),
): Set<MxArray> {
  if (value === null || typeof value !== "object") return into;
  if (isMxArray(value)) {
    into.add(value);
    return into;
  }
  if (seen.has(value)) return into;
  seen.add(value);
  if (Array.isArray(value) || value instanceof Set) {
    for (const v of value) collectArrays(v, into, seen);
  } else if (value instanceof Map) {
    for (const v of value.values()) collectArrays(v, into, seen);
  } else if (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null) {
    for (const v of Object.values(value)) collectArrays(v, into, seen);
  }
  return into;
}

function close(scope: Scope, result: unknown): void {
  scope.closed = true;
  const kept = collectArrays(result);
  let parent = scope.parent;
  while (parent?.closed) parent = parent.parent;
  for (const a of scope.arrays) {
    if (!kept.has(a)) {
      a.dispose();
    } else if (parent !== undefined) {
      parent.arrays.add(a);
    }
  }
  scope.arrays.clear();
}

function isPromiseLike(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === "object" || typeof value === "function") &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

/**
 * Runs `fn` in a scope; arrays it creates and does not return are disposed when it ends
 * (for an async `fn`, when its promise settles, also on rejection).
 */
export function tidy<T>(fn: () => Promise<T>): Promise<T>;
export function tidy<T>(fn: () => T): T;
export function tidy<T>(fn: () => T | Promise<T>): T | Promise<T> {
  const scope: Scope = { arrays: new Set(), parent: scopes.getStore(), closed: false };
  let result: T | Promise<T>;
  try {
    result = scopes.run(scope, fn);
  } catch (error) {
    close(scope, undefined);
    throw error;
  }
  if (isPromiseLike(result)) {
    return Promise.resolve(result).then(
      (value) => {
        close(scope, value);
        return value;
      },
      (error: unknown) => {
        close(scope, undefined);
        throw error;
      },
    );
  }
  close(scope, result);
  return result;
}

/** Exempts the arrays inside `value` from every open tidy scope; returns `value`. */
export function keep<T>(value: T): T {
  const arrays = collectArrays(value);
  for (let scope = scopes.getStore(); scope !== undefined; scope = scope.parent) {
    for (const a of arrays) scope.arrays.delete(a);
  }
  return value;
}

/** Disposes every MxArray inside `value` (an array, a list, an object tree). Idempotent. */
export function dispose(value: unknown): void {
  for (const a of collectArrays(value)) a.dispose();
}

/**
 * The values a MilBuilder hands out and takes: vars (MilVar), typed constant data (ConstInit), an op
 * input (Arg) and the options every op method takes. Their own file so that the generated op
 * methods (builder-ops.gen.ts) name them without importing the builder that extends those methods.
 */
import { InvalidArgumentError } from "@anemll-qwen35/core";
import type { ConstValue, MilData, MilDType, TensorType, ValueType } from "./program.js";
import { typeToString } from "./program.js";
import type { RtTensor } from "./values.js";

/** A value in a function under construction: a name and a type. */
export class MilVar {
  /** @internal */
  _name: string;
  readonly type: ValueType;
  /** @internal the MilBuilder that made it (compared by identity; typed here without importing it) */
  readonly _owner: object;
  /** Produced by a const or constexpr_* op. */
  readonly isConst: boolean;
  /** @internal stored constant (const ops), kept so constants can be read back during building */
  readonly _const: ConstValue | undefined;
  /** @internal */
  _small: RtTensor | undefined;

  /** @internal */
  constructor(owner: object, name: string, type: ValueType, isConst: boolean, cv?: ConstValue) {
    this._owner = owner;
    this._name = name;
    this.type = type;
    this.isConst = isConst;
    this._const = cv;
  }

  get name(): string {
    return this._name;
  }

  /** The tensor type (throws for states). */
  get tensor(): TensorType {
    if (this.type.kind !== "tensor")
      throw new InvalidArgumentError(`'${this._name}' is a state, not a tensor`);
    return this.type;
  }

  get shape(): readonly number[] {
    return this.tensor.shape;
  }

  get dtype(): MilDType {
    return this.tensor.dtype;
  }

  toString(): string {
    return `%${this._name}: ${typeToString(this.type)}`;
  }
}

/** Explicitly typed constant data for op inputs and `const`. */
export interface ConstInit {
  readonly data: ArrayLike<number> | ArrayLike<boolean> | readonly string[] | MilData;
  readonly dtype: MilDType;
  readonly shape: readonly number[];
}

/** What an op input accepts: a var, a literal (typed from the input's signature) or typed data. */
export type Arg = MilVar | number | boolean | string | readonly number[] | readonly boolean[] | ConstInit;

export interface OpOptions {
  /** The op's name (also its output's name); auto-generated (`<type>_<n>`) when absent. */
  readonly name?: string;
}

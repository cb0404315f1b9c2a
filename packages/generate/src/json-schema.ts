import { UnsupportedSchemaError } from "./errors.js";

/** A JSON Schema: an object, or `true` (anything) / `false` (nothing). */
export type JsonSchema = boolean | { [keyword: string]: unknown };

/**
 * The JSON-Schema keywords constrained decoding enforces, by what they apply to. The engine
 * (xgrammar) turns a schema into a grammar; keywords it would ignore or only approximate are not
 * listed, and `checkJsonSchema` refuses them, so that every output the grammar admits is valid
 * against the whole schema (the tests check that with an independent validator).
 */
export const SUPPORTED_SCHEMA_KEYWORDS = {
  any: [
    "type",
    "enum",
    "const",
    "anyOf",
    "allOf (one schema)",
    "$ref (#, #/$defs/…, #/definitions/…)",
    "$defs",
    "definitions",
  ],
  object: ["properties", "required", "additionalProperties"],
  array: ["items", "prefixItems", "minItems", "maxItems"],
  string: ["minLength", "maxLength", "pattern", "format: uuid"],
  integer: ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
  annotations: [
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$schema",
    "$id",
    "deprecated",
    "readOnly",
    "writeOnly",
  ],
} as const;

/** Keywords that only describe; they never constrain, so any value is fine. */
const ANNOTATIONS = new Set<string>(SUPPORTED_SCHEMA_KEYWORDS.annotations);
const TYPES = new Set(["object", "array", "string", "integer", "number", "boolean", "null"]);
/**
 * The engine's other formats admit strings validators refuse (dates like 02-31, minute 60, IPv4
 * octets with leading zeros, as the tests found), so only uuid is enforced.
 */
const FORMATS = new Set(["uuid"]);

/** Keywords a grammar cannot enforce (or the engine does not), with what to do instead. */
const REFUSED = new Map<string, string>([
  ["oneOf", "a grammar cannot make the branches exclusive; use anyOf"],
  ["allOf", "only an allOf of exactly one schema is supported; merge the schemas"],
  ["not", "a grammar cannot exclude a schema"],
  ["if", "conditional schemas are not supported"],
  ["then", "conditional schemas are not supported"],
  ["else", "conditional schemas are not supported"],
  ["dependentRequired", "dependencies between properties are not supported"],
  ["dependentSchemas", "dependencies between properties are not supported"],
  ["dependencies", "dependencies between properties are not supported"],
  ["multipleOf", "a grammar cannot enforce divisibility"],
  ["uniqueItems", "a grammar cannot keep array items distinct"],
  ["contains", "contains / minContains / maxContains are not supported"],
  ["minContains", "contains / minContains / maxContains are not supported"],
  ["maxContains", "contains / minContains / maxContains are not supported"],
  ["patternProperties", "property names are fixed by properties; patternProperties is not supported"],
  ["propertyNames", "property names are fixed by properties; propertyNames is not supported"],
  ["minProperties", "minProperties / maxProperties are not supported"],
  ["maxProperties", "minProperties / maxProperties are not supported"],
  ["unevaluatedProperties", "use additionalProperties"],
  ["unevaluatedItems", "use items"],
  ["$dynamicRef", "only local $ref is supported"],
  ["$recursiveRef", "only local $ref is supported"],
  ["$anchor", "only $ref by JSON pointer (#/$defs/NAME) is supported"],
  ["contentMediaType", "content keywords are not supported"],
  ["contentEncoding", "content keywords are not supported"],
]);

/** Keywords that may stand beside each kind of schema (besides annotations and $defs). */
const BY_TYPE: Record<string, readonly string[]> = {
  object: ["properties", "required", "additionalProperties"],
  array: ["items", "prefixItems", "minItems", "maxItems"],
  string: ["minLength", "maxLength", "pattern", "format"],
  integer: ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
  number: ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"],
  boolean: [],
  null: [],
};

type Path = readonly (string | number)[];
type SchemaObject = { [keyword: string]: unknown };

/**
 * Throws `UnsupportedSchemaError` (naming the keyword and where it is, below `where`) unless every
 * keyword of `schema` is one constrained decoding enforces exactly: see SUPPORTED_SCHEMA_KEYWORDS
 * and the package README. Checks values too (bounds in order, local references that resolve,
 * enum values of the declared type), so that the engine is only ever handed schemas it compiles.
 */
export function checkJsonSchema(schema: unknown, where = "schema"): void {
  new SchemaChecker(schema, where).check(schema, []);
}

class SchemaChecker {
  constructor(
    private readonly root: unknown,
    private readonly where: string,
  ) {}

  fail(path: Path, keyword: string | undefined, message: string): never {
    throw new UnsupportedSchemaError(this.where, path, keyword, message);
  }

  check(schema: unknown, path: Path): void {
    if (schema === true) return;
    if (schema === false) this.fail(path, undefined, "the schema `false` admits no value");
    if (!isObject(schema)) this.fail(path, undefined, "a schema must be an object or true");
    const s = schema;
    for (const key of Object.keys(s)) {
      if (ANNOTATIONS.has(key) || key === "$defs" || key === "definitions") continue;
      const refused = REFUSED.get(key);
      if (refused !== undefined) {
        if (key === "allOf" && Array.isArray(s.allOf) && s.allOf.length === 1) continue;
        this.fail([...path, key], key, `"${key}" is not supported: ${refused}`);
      }
    }
    for (const defs of ["$defs", "definitions"]) {
      if (s[defs] === undefined) continue;
      if (!isObject(s[defs])) this.fail([...path, defs], defs, `"${defs}" must be an object of schemas`);
      for (const [name, sub] of Object.entries(s[defs])) this.check(sub, [...path, defs, name]);
    }

    // The engine takes the first of these it finds and ignores the rest: they stand alone.
    for (const lead of ["$ref", "const", "enum", "anyOf", "allOf"]) {
      if (s[lead] === undefined) continue;
      const extra = Object.keys(s).filter(
        (k) => k !== lead && k !== "type" && !ANNOTATIONS.has(k) && k !== "$defs" && k !== "definitions",
      );
      if (extra.length > 0 || (s.type !== undefined && lead !== "const" && lead !== "enum")) {
        const other = extra[0] ?? "type";
        this.fail(
          [...path, other],
          other,
          `"${other}" cannot stand beside "${lead}": move it into the ${lead} branch(es)`,
        );
      }
      if (lead === "$ref") this.checkRef(s.$ref, [...path, "$ref"]);
      else if (lead === "const") this.checkValues([s.const], s.type, [...path, "const"]);
      else {
        const list = s[lead];
        const what = lead === "enum" ? "values" : "schemas";
        if (!Array.isArray(list) || list.length === 0)
          this.fail([...path, lead], lead, `"${lead}" must be a non-empty array of ${what}`);
        if (lead === "enum") this.checkValues(list, s.type, [...path, "enum"]);
        else for (let i = 0; i < list.length; i++) this.check(list[i], [...path, lead, i]);
      }
      return;
    }

    const types = this.types(s.type, path);
    const allowed = new Set<string>();
    for (const t of types ?? []) for (const k of BY_TYPE[t]) allowed.add(k);
    for (const key of Object.keys(s)) {
      if (key === "type" || ANNOTATIONS.has(key) || key === "$defs" || key === "definitions") continue;
      const known = Object.values(BY_TYPE).some((ks) => ks.includes(key));
      if (!known)
        this.fail([...path, key], key, `"${key}" is not a JSON-Schema keyword this server enforces`);
      if (types === undefined) {
        this.fail([...path, key], key, `"${key}" needs a "type" beside it (the engine reads it per type)`);
      }
      if (!allowed.has(key))
        this.fail([...path, key], key, `"${key}" does not apply to type ${types.join(" | ")}`);
    }
    if (types === undefined) return; // {} or annotations only: any JSON value
    if (types.includes("object")) this.checkObject(s, path);
    if (types.includes("array")) this.checkArray(s, path);
    if (types.includes("string")) this.checkString(s, path);
    if (types.includes("integer") || types.includes("number")) this.checkNumber(s, path, types);
  }

  private types(type: unknown, path: Path): string[] | undefined {
    if (type === undefined) return undefined;
    const list = Array.isArray(type) ? type : [type];
    if (
      list.length === 0 ||
      list.some((t) => typeof t !== "string" || !TYPES.has(t)) ||
      new Set(list).size !== list.length
    ) {
      this.fail(
        [...path, "type"],
        "type",
        `"type" must be one of ${[...TYPES].join(", ")} or a list of distinct ones`,
      );
    }
    return list as string[];
  }

  private checkObject(s: SchemaObject, path: Path): void {
    const props = s.properties ?? {};
    if (!isObject(props))
      this.fail([...path, "properties"], "properties", '"properties" must be an object of schemas');
    for (const [name, sub] of Object.entries(props)) {
      // the engine writes property names into its grammar's string literals unescaped
      if (/["\\]/.test(name) || hasControl(name)) {
        this.fail(
          [...path, "properties", name],
          "properties",
          `property name ${JSON.stringify(name)} has a quote, backslash or control character`,
        );
      }
      this.check(sub, [...path, "properties", name]);
    }
    const extra = s.additionalProperties;
    if (extra !== undefined && typeof extra !== "boolean")
      this.check(extra, [...path, "additionalProperties"]);
    if (s.required !== undefined) {
      const req = s.required;
      if (!Array.isArray(req) || req.some((r) => typeof r !== "string") || new Set(req).size !== req.length)
        this.fail([...path, "required"], "required", '"required" must be a list of distinct property names');
      const missing = (req as string[]).find((r) => !Object.hasOwn(props, r));
      if (missing !== undefined)
        this.fail(
          [...path, "required"],
          "required",
          `required property "${missing}" is not declared in "properties"`,
        );
    }
  }

  private checkArray(s: SchemaObject, path: Path): void {
    if (s.items !== undefined) {
      if (Array.isArray(s.items))
        this.fail([...path, "items"], "items", '"items" must be one schema (use prefixItems for tuples)');
      if (s.items === false)
        this.fail([...path, "items"], "items", '"items": false is not supported (use maxItems: 0)');
      this.check(s.items, [...path, "items"]);
    }
    if (s.prefixItems !== undefined) {
      if (!Array.isArray(s.prefixItems))
        this.fail([...path, "prefixItems"], "prefixItems", '"prefixItems" must be an array of schemas');
      for (let i = 0; i < s.prefixItems.length; i++)
        this.check(s.prefixItems[i], [...path, "prefixItems", i]);
    }
    this.checkCounts(s, "minItems", "maxItems", path);
  }

  private checkString(s: SchemaObject, path: Path): void {
    this.checkCounts(s, "minLength", "maxLength", path);
    if (s.format !== undefined && (typeof s.format !== "string" || !FORMATS.has(s.format)))
      this.fail([...path, "format"], "format", `"format" must be one of ${[...FORMATS].join(", ")}`);
    if (s.pattern !== undefined) {
      if (typeof s.pattern !== "string")
        this.fail([...path, "pattern"], "pattern", '"pattern" must be a string');
      if (s.minLength !== undefined || s.maxLength !== undefined || s.format !== undefined)
        this.fail(
          [...path, "pattern"],
          "pattern",
          '"pattern" cannot be combined with minLength, maxLength or format',
        );
      checkPattern(s.pattern, (why) => this.fail([...path, "pattern"], "pattern", why));
    }
  }

  private checkNumber(s: SchemaObject, path: Path, types: readonly string[]): void {
    const integerOnly = !types.includes("number");
    const bound = ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"].find(
      (k) => s[k] !== undefined,
    );
    // the engine's ranges for non-integers admit values outside them (-25 for minimum -2.5)
    if (!integerOnly && bound)
      this.fail(
        [...path, bound],
        bound,
        `"${bound}" is only enforced on integers; use type integer or drop it`,
      );
    let lo = Number.NEGATIVE_INFINITY;
    let hi = Number.POSITIVE_INFINITY;
    for (const k of ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"]) {
      const v = s[k];
      if (v === undefined) continue;
      if (typeof v !== "number" || !Number.isFinite(v))
        this.fail([...path, k], k, `"${k}" must be a finite number`);
      if (integerOnly && !Number.isSafeInteger(v))
        this.fail([...path, k], k, `"${k}" of an integer must be a whole number within ±2^53`);
      if (k.endsWith("inimum")) lo = Math.max(lo, v);
      else hi = Math.min(hi, v);
    }
    if (lo > hi) this.fail(path, "minimum", `the range is empty (minimum ${lo} > maximum ${hi})`);
  }

  private checkCounts(s: SchemaObject, min: string, max: string, path: Path): void {
    for (const k of [min, max]) {
      const v = s[k];
      if (v !== undefined && !(Number.isSafeInteger(v) && (v as number) >= 0))
        this.fail([...path, k], k, `"${k}" must be a whole number >= 0`);
    }
    if (s[min] !== undefined && s[max] !== undefined && (s[min] as number) > (s[max] as number))
      this.fail([...path, min], min, `"${min}" is larger than "${max}"`);
  }

  private checkValues(values: unknown[], type: unknown, path: Path): void {
    const types = this.types(type, path.slice(0, -1));
    if (!types) return;
    values.forEach((v, i) => {
      if (!types.some((t) => jsonTypeMatches(v, t)))
        this.fail(
          [...path, i],
          path.at(-1) as string,
          `${JSON.stringify(v)} is not of type ${types.join(" | ")}`,
        );
    });
  }

  private checkRef(ref: unknown, path: Path): void {
    if (typeof ref !== "string" || !(ref === "#" || /^#\/(\$defs|definitions)\/[^/]+$/.test(ref)))
      this.fail(
        path,
        "$ref",
        '"$ref" must be "#", "#/$defs/NAME" or "#/definitions/NAME" (local references only)',
      );
    if (ref === "#") return;
    const [, defs, name] = (ref as string).split("/");
    const target =
      isObject(this.root) && isObject(this.root[defs]) ? this.root[defs][decodePointer(name)] : undefined;
    if (target === undefined) this.fail(path, "$ref", `"${ref}" does not resolve to a schema of the root`);
  }
}

/** What the engine's regex converter and JavaScript's RegExp both read the same way. */
function checkPattern(pattern: string, fail: (why: string) => never): void {
  try {
    new RegExp(pattern, "u");
  } catch (err) {
    fail(`"pattern" is not a valid regular expression: ${(err as Error).message}`);
  }
  if (/\(\?[=!<]|\\[1-9]|\\k<|\\[bBpP]/.test(pattern))
    fail('"pattern" uses lookaround, backreferences, \\b or \\p{…}, which a grammar cannot express');
  if (/\(\?[a-z]/i.test(pattern)) fail('"pattern" uses inline flags, which are not supported');
}

function jsonTypeMatches(v: unknown, t: string): boolean {
  switch (t) {
    case "null":
      return v === null;
    case "boolean":
      return typeof v === "boolean";
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number";
    case "string":
      return typeof v === "string";
    case "array":
      return Array.isArray(v);
    default:
      return isObject(v);
  }
}

function decodePointer(part: string): string {
  return part.replaceAll("~1", "/").replaceAll("~0", "~");
}

function isObject(v: unknown): v is SchemaObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) < 0x20) return true;
  return false;
}

/**
 * Duplicate-key detection for JSON text. JSON.parse silently keeps the last of two equal keys,
 * which would hide a corrupt safetensors header or index (two entries for one tensor name), so
 * the raw text is scanned for keys repeated within one object.
 *
 * The scanner assumes text that JSON.parse has already accepted; it only tracks strings,
 * object/array nesting and which strings are keys.
 */

export interface DuplicateKey {
  /** The repeated key, decoded. */
  key: string;
  /** Keys of the enclosing objects from the root, e.g. ["weight_map"]; array items as "[i]". */
  path: string[];
}

interface Frame {
  keys: Set<string> | null; // null for arrays
  pathKey: string; // the key (or [index]) under which this container sits
  index: number; // array item counter
  expectKey: boolean; // in an object: the next string is a key
  lastKey: string;
}

/** All keys that occur twice in the same object, in text order. */
export function findDuplicateKeys(text: string): DuplicateKey[] {
  const found: DuplicateKey[] = [];
  const stack: Frame[] = [];
  const pathOf = () => stack.slice(1).map((f) => f.pathKey);
  const childKey = (): string => {
    const top = stack[stack.length - 1];
    if (!top) return "";
    return top.keys ? top.lastKey : `[${top.index}]`;
  };
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      let j = i + 1;
      while (j < n) {
        const d = text.charCodeAt(j);
        if (d === 0x5c /* \ */) j += 2;
        else if (d === 0x22) break;
        else j++;
      }
      const top = stack[stack.length - 1];
      if (top?.keys && top.expectKey) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (top.keys.has(key)) found.push({ key, path: pathOf() });
        top.keys.add(key);
        top.lastKey = key;
        top.expectKey = false;
      }
      i = j + 1;
      continue;
    }
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      stack.push({
        keys: c === 0x7b ? new Set() : null,
        pathKey: childKey(),
        index: 0,
        expectKey: true,
        lastKey: "",
      });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top) {
        if (top.keys) top.expectKey = true;
        else top.index++;
      }
    }
    i++;
  }
  return found;
}

/**
 * JSON from a REST body, read within bounds and in slices. Node's JSON.parse cannot be bounded: an
 * array of 135 million elements aborts the process ("invalid size"), 100,000 levels of nesting
 * overflow the stack of whatever walks the result, and a 64 MiB body blocks the thread that serves
 * every other client for most of a second. This reader:
 *
 * - refuses nesting deeper than `maxDepth` (Triton's 100) and more than `maxValues` values, as soon
 *   as it reaches them, naming the byte;
 * - reads `sliceBytes` at a time and lets the event loop run between slices, so no body holds its
 *   thread for long whatever its size;
 * - builds objects without a prototype, so a key such as "__proto__" is a key like any other;
 * - accepts NaN, Infinity and -Infinity, as Triton's reader does (RapidJSON's kParseNanAndInfFlag),
 *   and refuses a number too large for a double (1e400) instead of reading it as Infinity;
 * - leaves the values `defer` picks unbuilt (`RawJson`: where their bytes are, how deep they go and
 *   how many scalars they hold), for a reader of their own: a tensor's `data`, decoded straight into
 *   its datatype's bytes once its datatype and shape are known (json-tensors.ts).
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject | RawJson;
export interface JsonObject {
  [key: string]: JsonValue;
}

/** A value left unbuilt: bytes [start, end) of the body, nesting `depth` below it, `scalars` leaves. */
export class RawJson {
  constructor(readonly start: number, readonly end: number, readonly depth: number, readonly scalars: number) {}
}

export interface JsonLimits {
  /** Deepest nesting of arrays and objects (the outermost value is depth 1). */
  maxDepth: number;
  /**
   * Most values built (each scalar, array and object counts one). A deferred value's scalars are
   * not built, so not counted: their reader bounds them (a tensor's by its declared shape).
   */
  maxValues: number;
}

/** Triton's limit on nesting (HTTP_MAX_JSON_NESTING_DEPTH). */
export const JSON_MAX_DEPTH = 100;

/** Bytes read between turns of the event loop: a slice takes a few milliseconds. */
export const JSON_SLICE_BYTES = 1 << 20;

/** A body that is not JSON, or not within the limits: the message names what and the byte. */
export class JsonError extends Error {
  constructor(message: string, readonly offset: number) {
    super(`${message} at byte ${offset}`);
  }
}

/** A path inside the document: object keys and array indices from the outermost value. */
export type JsonPath = readonly (string | number)[];

export interface ReadJsonOptions {
  limits: JsonLimits;
  /** Values to leave unbuilt (asked only of values this deep or shallower: `deferDepth`). */
  defer?: (path: JsonPath) => boolean;
  deferDepth?: number;
  sliceBytes?: number;
}

/** Lets the event loop run: I/O and other requests' work go before the next slice. */
export const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

const enum Expect {
  Value,
  ValueOrEnd,
  Key,
  KeyOrEnd,
  Colon,
  After,
  Skip,
  Done,
}

type Frame = { array: JsonValue[]; object: null; key: null } | { array: null; object: JsonObject; key: string | null };

const SPACE = 0x20, TAB = 0x09, LF = 0x0a, CR = 0x0d;
const QUOTE = 0x22, BACKSLASH = 0x5c, COMMA = 0x2c, COLON = 0x3a;
const OPEN_ARRAY = 0x5b, CLOSE_ARRAY = 0x5d, OPEN_OBJECT = 0x7b, CLOSE_OBJECT = 0x7d;

const isSpace = (c: number) => c === SPACE || c === LF || c === CR || c === TAB;
/** Bytes a number token may hold (checked against the grammar once read). */
const isNumberByte = (c: number) => (c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e || c === 0x65 || c === 0x45;
const isLetter = (c: number) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

/** The JSON in `bytes` (UTF-8), built within `options.limits`; throws JsonError. */
export async function readJson(bytes: Uint8Array, options: ReadJsonOptions): Promise<JsonValue> {
  const reader = new JsonReader(bytes, options);
  const slice = options.sliceBytes ?? JSON_SLICE_BYTES;
  while (!reader.run(slice)) await yieldToLoop();
  return reader.result;
}

/** The same, for bodies small enough to read in one go (a route's few hundred bytes). */
export function readJsonNow(bytes: Uint8Array, options: ReadJsonOptions): JsonValue {
  const reader = new JsonReader(bytes, options);
  reader.run(Infinity);
  return reader.result;
}

class JsonReader {
  readonly #b: Uint8Array;
  readonly #text: Buffer;
  readonly #o: ReadJsonOptions;
  readonly #deferDepth: number;
  #pos = 0;
  #expect = Expect.Value;
  readonly #stack: Frame[] = [];
  #values = 0;
  #root: JsonValue = null;
  // A deferred value being skipped: where it began, how deep it is now and went, its scalars.
  #skipStart = 0;
  #skipNest = 0;
  #skipDeepest = 0;
  #skipScalars = 0;
  #skipInScalar = false;

  constructor(bytes: Uint8Array, options: ReadJsonOptions) {
    this.#b = bytes;
    this.#text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.#o = options;
    this.#deferDepth = options.deferDepth ?? 4;
  }

  get result(): JsonValue {
    return this.#root;
  }

  #fail(message: string, at = this.#pos): never {
    throw new JsonError(message, at);
  }

  #count(n = 1): void {
    this.#values += n;
    if (this.#values > this.#o.limits.maxValues) this.#fail(`more than ${this.#o.limits.maxValues} values`);
  }

  #spaces(): number {
    const b = this.#b;
    while (this.#pos < b.length && isSpace(b[this.#pos])) this.#pos++;
    return this.#pos < b.length ? b[this.#pos] : -1;
  }

  /** Runs until about `budget` more bytes are read; true once the document is read. */
  run(budget: number): boolean {
    const stop = this.#pos + budget;
    while (this.#pos < stop || this.#expect === Expect.Done) {
      if (this.#expect === Expect.Done) {
        if (this.#spaces() !== -1) this.#fail('more JSON after the document');
        return true;
      }
      if (this.#expect === Expect.Skip) {
        this.#skip(stop);
        continue;
      }
      const c = this.#spaces();
      if (c === -1) this.#fail('the JSON ends early');
      switch (this.#expect) {
        case Expect.ValueOrEnd:
        case Expect.Value:
          if (this.#expect === Expect.ValueOrEnd && c === CLOSE_ARRAY) {
            this.#pos++;
            this.#close();
          } else {
            this.#value(c);
          }
          break;
        case Expect.KeyOrEnd:
        case Expect.Key:
          if (this.#expect === Expect.KeyOrEnd && c === CLOSE_OBJECT) {
            this.#pos++;
            this.#close();
            break;
          }
          if (c !== QUOTE) this.#fail('expected a key (a string)');
          (this.#stack[this.#stack.length - 1] as Frame & { key: string | null }).key = this.#string();
          this.#expect = Expect.Colon;
          break;
        case Expect.Colon:
          if (c !== COLON) this.#fail('expected ":" after a key');
          this.#pos++;
          this.#expect = Expect.Value;
          break;
        case Expect.After: {
          const top = this.#stack[this.#stack.length - 1];
          this.#pos++;
          if (c === COMMA) this.#expect = top.array ? Expect.Value : Expect.Key;
          else if (top.array && c === CLOSE_ARRAY) this.#close();
          else if (top.object && c === CLOSE_OBJECT) this.#close();
          else this.#fail(`expected "," or "${top.array ? ']' : '}'}"`, this.#pos - 1);
          break;
        }
      }
    }
    return false;
  }

  #path(): JsonPath {
    return this.#stack.map((f) => (f.array ? f.array.length : (f.key as string)));
  }

  #value(c: number): void {
    if (this.#o.defer && this.#stack.length < this.#deferDepth && this.#o.defer(this.#path())) {
      this.#skipStart = this.#pos;
      this.#skipNest = 0;
      this.#skipDeepest = 0;
      this.#skipScalars = 0;
      this.#skipInScalar = false;
      this.#expect = Expect.Skip;
      return;
    }
    if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (this.#stack.length + 1 > this.#o.limits.maxDepth) this.#fail(`nesting deeper than ${this.#o.limits.maxDepth} levels`);
      this.#count();
      this.#pos++;
      if (c === OPEN_ARRAY) {
        this.#stack.push({ array: [], object: null, key: null });
        this.#expect = Expect.ValueOrEnd;
      } else {
        this.#stack.push({ array: null, object: Object.create(null) as JsonObject, key: null });
        this.#expect = Expect.KeyOrEnd;
      }
      return;
    }
    this.#count();
    this.#emit(this.#scalar(c));
  }

  #close(): void {
    const frame = this.#stack.pop() as Frame;
    this.#emit(frame.array ?? frame.object);
  }

  #emit(value: JsonValue): void {
    const top = this.#stack[this.#stack.length - 1];
    if (!top) {
      this.#root = value;
      this.#expect = Expect.Done;
      return;
    }
    if (top.array) top.array.push(value);
    else top.object[top.key as string] = value;
    this.#expect = Expect.After;
  }

  /** A string, number, true, false, null, NaN, Infinity or -Infinity at the cursor. */
  #scalar(c: number): JsonValue {
    if (c === QUOTE) return this.#string();
    const start = this.#pos;
    const word = this.#word();
    switch (word) {
      case 'true': return true;
      case 'false': return false;
      case 'null': return null;
      case 'NaN': return NaN;
      case 'Infinity': return Infinity;
      case '-Infinity': return -Infinity;
      default: return readNumber(word, start);
    }
  }

  /** The bytes of a bare token (number or literal) at the cursor. */
  #word(): string {
    const b = this.#b;
    const start = this.#pos;
    while (this.#pos < b.length && (isNumberByte(b[this.#pos]) || isLetter(b[this.#pos]))) this.#pos++;
    if (this.#pos === start) this.#fail(`unexpected ${JSON.stringify(String.fromCharCode(b[start]))}`);
    return this.#text.toString('latin1', start, this.#pos);
  }

  #string(): string {
    const b = this.#b;
    const start = this.#pos;
    let escaped = false;
    let i = start + 1;
    for (; i < b.length; i++) {
      const c = b[i];
      if (c === QUOTE) break;
      if (c === BACKSLASH) {
        escaped = true;
        i++;
      } else if (c < 0x20) {
        this.#fail('a control character inside a string', i);
      }
    }
    if (i >= b.length) this.#fail('a string that does not end', start);
    this.#pos = i + 1;
    if (!escaped) return this.#text.toString('utf8', start + 1, i);
    try {
      return JSON.parse(this.#text.toString('utf8', start, i + 1)) as string;
    } catch {
      return this.#fail('a string with a bad escape', start);
    }
  }

  /** Skips a deferred value, counting its nesting and scalars, until it ends or the budget does. */
  #skip(stop: number): void {
    const b = this.#b;
    const maxDepth = this.#o.limits.maxDepth - this.#stack.length;
    const end = Math.min(stop, b.length);
    // Locals in the loop (a tensor's data is most of a large body): written back before leaving it.
    let pos = this.#pos;
    let nest = this.#skipNest;
    let scalars = this.#skipScalars;
    let inScalar = this.#skipInScalar;
    const save = () => {
      this.#pos = pos;
      this.#skipNest = nest;
      this.#skipScalars = scalars;
      this.#skipInScalar = inScalar;
    };
    while (pos < end) {
      const c = b[pos];
      // The common bytes of numeric data first: digits, '-', '.', and ','.
      if ((c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2e) {
        if (!inScalar) {
          scalars++;
          inScalar = true;
        }
        pos++;
        continue;
      }
      if (c === COMMA) {
        inScalar = false;
        pos++;
        if (nest === 0) {
          save();
          if (scalars === 0) this.#fail('unexpected ","', pos - 1);
          return this.#deferredAt(pos - 1);
        }
        continue;
      }
      if (c === QUOTE) {
        save();
        this.#string();
        pos = this.#pos;
        scalars++;
        inScalar = false;
        if (nest === 0) {
          save();
          return this.#deferred();
        }
        continue;
      }
      if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
        inScalar = false;
        nest++;
        if (nest > maxDepth) {
          this.#pos = pos;
          this.#fail(`nesting deeper than ${this.#o.limits.maxDepth} levels`);
        }
        if (nest > this.#skipDeepest) this.#skipDeepest = nest;
        pos++;
        continue;
      }
      if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
        inScalar = false;
        // A bare scalar deferred whole ends at its container's bracket, which is not its own.
        if (nest === 0) {
          save();
          if (scalars === 0) this.#fail(`unexpected "${String.fromCharCode(c)}"`);
          return this.#deferredAt(pos);
        }
        nest--;
        pos++;
        if (nest === 0) {
          save();
          return this.#deferred();
        }
        continue;
      }
      if (c === COLON || isSpace(c)) {
        inScalar = false;
        // A bare scalar deferred whole ends at the first byte after it.
        if (nest === 0 && scalars > 0) {
          save();
          return this.#deferredAt(pos);
        }
        if (nest === 0 && c === COLON) {
          this.#pos = pos;
          this.#fail('unexpected ":"');
        }
        pos++;
        continue;
      }
      // Any other bare token byte (letters of true, NaN, ...): counted once, checked by the reader the value is for.
      if (!inScalar) {
        scalars++;
        inScalar = true;
      }
      pos++;
    }
    save();
    if (pos >= b.length) this.#fail('the JSON ends early');
  }

  #deferred(): void {
    this.#deferredAt(this.#pos);
  }

  /** The deferred value ended before byte `end`. */
  #deferredAt(end: number): void {
    this.#pos = end;
    this.#expect = Expect.After;
    this.#emit(new RawJson(this.#skipStart, end, this.#skipDeepest, this.#skipScalars));
  }
}

/** A JSON number token's value; a token that is not one, or overflows a double, is refused. */
export function readNumber(word: string, at: number): number {
  if (!NUMBER.test(word)) throw new JsonError(`${JSON.stringify(word.slice(0, 40))} is not a JSON value`, at);
  const n = Number(word);
  if (!Number.isFinite(n)) throw new JsonError(`the number ${word.slice(0, 40)} is too large for a double`, at);
  return n;
}

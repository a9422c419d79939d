/**
 * A tensor's JSON `data`, both ways, as Triton's HTTP endpoint reads and writes it.
 *
 * In: the `data` the body reader left unbuilt (json-reader.ts RawJson) is decoded straight into the
 * datatype's bytes, flat or nested, element by element: never more elements than the declared
 * shape holds, each one checked against its datatype's range (UINT8 300 is refused, not wrapped
 * to 44; Triton wraps it, with a FIXME saying it should not), a float type's value beyond its
 * finite range refused unless written as Infinity, and NaN, Infinity and -Infinity accepted as
 * Triton accepts them. Numbers are read from the bytes without making a string of each (a decimal
 * of up to 15 digits and a small exponent is exact in one multiplication or division, Clinger's
 * fast path; others go through Number()). Decoding runs in slices, the event loop turning between.
 *
 * Out: each element written as Triton writes it: NaN, Infinity and -Infinity as those words (JSON
 * has no form for them; RapidJSON's kWriteNanAndInfFlag, which Python's json reads), never `null`;
 * as pieces of text, for the body to be written piece by piece.
 */
import { byDatatype, dtypeInfo, type Datatype } from '../shared/dtypes.js';
import { joinBytesElements, splitBytesElements } from '../shared/bytes-elements.js';
import { errors, quote, quoteShape } from '../shared/errors.js';
import { type RawJson, yieldToLoop } from './json-reader.js';

/** Elements decoded or written between turns of the event loop. */
const SLICE_ELEMENTS = 1 << 16;

/** The range each integer datatype holds. */
const INTEGER_RANGE: Partial<Record<Datatype, readonly [bigint, bigint]>> = {
  UINT8: [0n, 255n], UINT16: [0n, 65535n], UINT32: [0n, 4294967295n], UINT64: [0n, 18446744073709551615n],
  INT8: [-128n, 127n], INT16: [-32768n, 32767n], INT32: [-2147483648n, 2147483647n], INT64: [-9223372036854775808n, 9223372036854775807n],
};

/** The largest finite value of each float datatype that has a JSON form. */
const FLOAT_MAX: Partial<Record<Datatype, number>> = { FP32: 3.4028234663852886e38, FP64: Number.MAX_VALUE };

/** Powers of ten a double holds exactly (Clinger's fast path). */
const EXACT_POWERS = Array.from({ length: 23 }, (_, i) => 10 ** i);

const QUOTE = 0x22, BACKSLASH = 0x5c, MINUS = 0x2d, DOT = 0x2e;

const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isSeparator = (c: number) => c === 0x2c || c === 0x5b || c === 0x5d || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** One scalar of a tensor's data, as the scanner found it. */
const enum Kind {
  Number,
  Integer,
  Word,
  String,
}

/** Reads the scalars of a span one by one, flattening any nesting (its brackets were checked as it was skipped). */
class Scalars {
  readonly #b: Buffer;
  readonly #end: number;
  at: number;
  /** The scalar just read: its kind, where its bytes are, and (a number) its value when the fast path had it. */
  kind = Kind.Word;
  start = 0;
  stop = 0;
  value = NaN;

  constructor(body: Uint8Array, raw: RawJson) {
    this.#b = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    this.#end = raw.end;
    this.at = raw.start;
  }

  get text(): string {
    return this.#b.toString(this.kind === Kind.String ? 'utf8' : 'latin1', this.start, this.stop);
  }

  /** The next scalar (false when the span is done). */
  next(): boolean {
    const b = this.#b;
    while (this.at < this.#end && isSeparator(b[this.at])) this.at++;
    if (this.at >= this.#end) return false;
    const c = b[this.at];
    if (c === QUOTE) return this.#string();
    if (c === 0x7b || c === 0x7d || c === 0x3a) throw errors.invalidRequest(`tensor data holds an object at byte ${this.at}: it holds numbers, booleans or strings, in arrays`);
    this.start = this.at;
    if (c === MINUS || isDigit(c)) this.#number();
    while (this.at < this.#end && !isSeparator(b[this.at])) this.at++;
    this.stop = this.at;
    // A token that went on past a number's grammar (or was never one) is a word: true, NaN, ...
    if (this.kind !== Kind.Word && this.stop !== this.#numberEnd) this.kind = Kind.Word;
    return true;
  }

  #numberEnd = 0;

  /** A JSON number at the cursor: its kind (Integer or Number) and, where exact, its value. */
  #number(): void {
    const b = this.#b;
    let i = this.at;
    const negative = b[i] === MINUS;
    if (negative) i++;
    const digitsFrom = i;
    let mantissa = 0;
    let digits = 0;
    if (b[i] === 0x30) {
      i++;
    } else {
      while (i < this.#end && isDigit(b[i])) {
        if (digits < 16) mantissa = mantissa * 10 + (b[i] - 0x30);
        digits++;
        i++;
      }
    }
    if (i === digitsFrom) {
      this.kind = Kind.Word;
      this.#numberEnd = -1;
      return;
    }
    let exponent = 0;
    let integer = true;
    if (b[i] === DOT) {
      integer = false;
      i++;
      const fractionFrom = i;
      while (i < this.#end && isDigit(b[i])) {
        if (digits < 16) {
          mantissa = mantissa * 10 + (b[i] - 0x30);
          exponent--;
        }
        if (digits > 0 || b[i] !== 0x30) digits++;
        i++;
      }
      if (i === fractionFrom) return this.#notNumber();
    }
    if (b[i] === 0x65 || b[i] === 0x45) {
      integer = false;
      i++;
      let sign = 1;
      if (b[i] === 0x2b || b[i] === MINUS) sign = b[i++] === MINUS ? -1 : 1;
      const exponentFrom = i;
      let e = 0;
      while (i < this.#end && isDigit(b[i])) {
        if (e < 100000) e = e * 10 + (b[i] - 0x30);
        i++;
      }
      if (i === exponentFrom) return this.#notNumber();
      exponent += sign * e;
    }
    this.at = i;
    this.#numberEnd = i;
    this.kind = integer ? Kind.Integer : Kind.Number;
    // Exact when the digits fit a double's integer range and the power of ten is exact.
    if (digits <= 15 && exponent >= -22 && exponent <= 22) {
      const v = exponent >= 0 ? mantissa * EXACT_POWERS[exponent] : mantissa / EXACT_POWERS[-exponent];
      this.value = negative ? -v : v;
    } else {
      this.value = NaN; // not computed: the caller reads the text
    }
  }

  #notNumber(): void {
    this.kind = Kind.Word;
    this.#numberEnd = -1;
  }

  #string(): boolean {
    const b = this.#b;
    let i = this.at + 1;
    let escaped = false;
    while (b[i] !== QUOTE) {
      if (b[i] === BACKSLASH) {
        escaped = true;
        i++;
      }
      i++;
    }
    this.kind = Kind.String;
    this.start = this.at + 1;
    this.stop = i;
    this.at = i + 1;
    if (escaped) {
      // Rare: let JSON.parse resolve the escapes (the reader checked that the string ends).
      this.escaped = JSON.parse(this.#b.toString('utf8', this.start - 1, i + 1)) as string;
    } else {
      this.escaped = null;
    }
    return true;
  }

  /** A string with escapes, resolved; null when it had none (read `text`). */
  escaped: string | null = null;

  get string(): string {
    return this.escaped ?? this.text;
  }
}

/**
 * Input `name`'s `data` (the span `raw` of `body`) as the raw bytes of `datatype`, holding exactly
 * the elements `shape` needs. Throws STOWAGE_INVALID_TENSOR naming the element and what was expected.
 */
export async function decodeJsonData(body: Uint8Array, raw: RawJson, name: string, datatype: Datatype, shape: readonly number[]): Promise<Uint8Array> {
  const count = shape.reduce((a, b) => a * b, 1);
  const bad = (i: number, what: string, want: string) => errors.invalidTensor(`input ${quote(name)}: element ${i} is ${what}, not ${want} (datatype ${datatype})`);
  if (datatype === 'FP16' || datatype === 'BF16') {
    throw errors.invalidTensor(`input ${quote(name)}: ${datatype} has no JSON form; send it as binary data (parameters.binary_data_size)`);
  }
  if (raw.scalars !== count) {
    throw errors.invalidTensor(`input ${quote(name)}: shape ${quoteShape(shape)} needs ${count} elements, its data holds ${raw.scalars}`);
  }
  const s = new Scalars(body, raw);
  const shown = () => (s.kind === Kind.String ? JSON.stringify(s.string.slice(0, 40)) : s.text.slice(0, 40));
  if (datatype === 'BYTES') {
    const elements: Uint8Array[] = [];
    while (s.next()) {
      if (s.kind !== Kind.String) throw bad(elements.length, shown(), 'a string');
      elements.push(Buffer.from(s.string, 'utf8'));
      if (elements.length % SLICE_ELEMENTS === 0) await yieldToLoop();
    }
    return joinBytesElements(elements);
  }
  const info = dtypeInfo(datatype);
  const Typed = info.typedArray as unknown as { new (n: number): { [i: number]: number | bigint; buffer: ArrayBuffer } };
  const out = new Typed(count);
  const range = INTEGER_RANGE[datatype];
  const max = FLOAT_MAX[datatype];
  const wide = datatype === 'INT64' || datatype === 'UINT64';
  let i = 0;
  while (s.next()) {
    if (datatype === 'BOOL') {
      const word = s.kind === Kind.Word ? s.text : '';
      if (word !== 'true' && word !== 'false') throw bad(i, shown(), 'true or false');
      out[i] = word === 'true' ? 1 : 0;
    } else if (range) {
      if (s.kind !== Kind.Integer) throw bad(i, shown(), 'an integer');
      // Exact below 2^53 from the fast path; beyond, the digits themselves.
      const v = Number.isSafeInteger(s.value) ? BigInt(s.value) : BigInt(s.text);
      if (v < range[0] || v > range[1]) throw bad(i, shown(), `an integer from ${range[0]} to ${range[1]}`);
      out[i] = wide ? v : Number(v);
    } else {
      let v: number;
      if (s.kind === Kind.Number || s.kind === Kind.Integer) {
        v = Number.isNaN(s.value) ? Number(s.text) : s.value;
        if (!Number.isFinite(v)) throw bad(i, shown(), 'a number a double holds');
        if (max !== undefined && Math.abs(v) > max) throw bad(i, shown(), `a number within ${datatype}'s range (±${max})`);
      } else {
        const word = s.kind === Kind.Word ? s.text : '';
        if (word === 'NaN') v = NaN;
        else if (word === 'Infinity') v = Infinity;
        else if (word === '-Infinity') v = -Infinity;
        else throw bad(i, shown(), 'a number');
      }
      out[i] = v;
    }
    i++;
    if (i % SLICE_ELEMENTS === 0) await yieldToLoop();
  }
  return new Uint8Array(out.buffer);
}

/**
 * An output's bytes as its JSON `data` text (`[...]`, flat, row-major), in pieces, element by
 * element as Triton writes them; FP16 and BF16 have no JSON form (the caller sends them as binary).
 */
export async function encodeJsonData(datatype: string, bytes: Uint8Array): Promise<string[]> {
  const info = byDatatype(datatype);
  if (!info) return ['[]'];
  if (datatype === 'BYTES') return [JSON.stringify((splitBytesElements(bytes) ?? []).map((e) => new TextDecoder().decode(e)))];
  const Typed = info.typedArray as unknown as { new (b: ArrayBufferLike, offset: number, length: number): ArrayLike<number | bigint> };
  // A typed view needs its offset aligned for the type: an output at an odd place (rare) is copied first.
  // copy: a misaligned output into memory aligned for its typed view
  const aligned = bytes.byteOffset % info.elementBytes === 0 ? bytes : new Uint8Array(bytes);
  const view = new Typed(aligned.buffer, aligned.byteOffset, aligned.byteLength / info.elementBytes);
  const bool = datatype === 'BOOL';
  const parts: string[] = ['['];
  const piece: string[] = [];
  for (let from = 0; from < view.length; from += SLICE_ELEMENTS) {
    const to = Math.min(view.length, from + SLICE_ELEMENTS);
    piece.length = to - from;
    for (let i = from; i < to; i++) {
      const v = view[i];
      piece[i - from] = bool ? (v !== 0 ? 'true' : 'false') : String(v);
    }
    parts.push((from === 0 ? '' : ',') + piece.join(','));
    if (to < view.length) await yieldToLoop();
  }
  parts.push(']');
  return parts;
}

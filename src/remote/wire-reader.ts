/**
 * A cursor over one protobuf message's bytes, for the gateway's hand readers of the answers a check
 * reads from every node (status-report.ts, index-report.ts): each reads only the fields placement
 * uses and skips the rest by their wire type, so a field added to a message later costs nothing.
 * Every error names the message (`what`) and the byte where reading stopped.
 */
import { WIRE_I32, WIRE_I64, WIRE_LEN, WIRE_VARINT } from '../shared/protobuf-wire.js';

export class WireReader {
  at: number;
  constructor(readonly what: string, readonly buf: Buffer, start: number, readonly end: number) {
    this.at = start;
  }

  /** A reader over the LEN field just read (`span`'s bounds), for a nested message. */
  nested(start: number, end: number): WireReader {
    return new WireReader(this.what, this.buf, start, end);
  }

  /** `visit` each of the repeated message field `field`, with a reader over its bytes; every other field skipped. */
  forEachMessage(field: number, visit: (message: WireReader) => void): void {
    while (this.at < this.end) {
      const tag = this.varint();
      if (Math.floor(tag / 8) !== field || (tag & 7) !== WIRE_LEN) {
        this.skip(tag & 7);
        continue;
      }
      const [start, end] = this.span();
      visit(this.nested(start, end));
    }
  }

  /**
   * A varint, exact below 2^53 (every byte count, counter and time here), within the message. Not
   * shared/protobuf-wire.ts's, whose [value, next] pair per varint made a 10,000-model answer's
   * read twice as slow (32 ms against 15).
   */
  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.end) break;
      const b = this.buf[this.at++];
      value += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return value;
      scale *= 128;
    }
    throw new Error(`${this.what} malformed: a varint runs past byte ${this.at}`);
  }

  /** A LEN field's bounds, checked against the message's. */
  span(): [start: number, end: number] {
    const length = this.varint();
    const start = this.at;
    if (start + length > this.end) throw new Error(`${this.what} malformed: a field of ${length} bytes runs past its message at byte ${start}`);
    this.at = start + length;
    return [start, start + length];
  }

  string(): string {
    const [start, end] = this.span();
    return this.buf.toString('utf8', start, end);
  }

  /** Whether the LEN field here holds exactly `ascii`'s bytes (read past either way): no string made. */
  equalsAscii(ascii: string): boolean {
    const [start, end] = this.span();
    if (end - start !== ascii.length) return false;
    for (let i = 0; i < ascii.length; i++) if (this.buf[start + i] !== ascii.charCodeAt(i)) return false;
    return true;
  }

  double(): number {
    if (this.at + 8 > this.end) throw new Error(`${this.what} malformed: a double runs past byte ${this.at}`);
    const value = this.buf.readDoubleLE(this.at);
    this.at += 8;
    return value;
  }

  skip(wireType: number): void {
    if (wireType === WIRE_VARINT) this.varint();
    else if (wireType === WIRE_I64) this.at += 8;
    else if (wireType === WIRE_LEN) this.span();
    else if (wireType === WIRE_I32) this.at += 4;
    else throw new Error(`${this.what} malformed: wire type ${wireType} at byte ${this.at}`);
    if (this.at > this.end) throw new Error(`${this.what} malformed: a field runs past its message`);
  }
}

/**
 * The KServe V2 and control service definitions, loaded from proto/ with @grpc/proto-loader, and
 * how their requests are read off the wire: strictly (`WireSchema`, below), and with the requests
 * that own the memory their tensor bytes sit in marked, so those bytes can move to a device as
 * they are.
 *
 * Strictly, because protobufjs is lenient by design: a string that claims more bytes than the
 * message holds comes back cut short, a field sent with the wrong wire type is read as if it had
 * the right one, field number 0 is skipped, so a mangled ModelInferRequest can decode into a
 * different, plausible request. A client that sends such bytes has a bug, and it should hear so
 * (INVALID_ARGUMENT naming the field and the byte) from a node and a gateway alike, not a
 * NOT_FOUND for a model name made of noise. The check walks the message as the .proto declares it
 * (proto-loader's descriptors): every tag must be a valid field number and wire type, every length
 * must fit in its message, every known field must come with its type's wire type (repeated scalars
 * packed or not, as the spec allows), strings must be UTF-8, and declared sub-messages are checked
 * the same way. Unknown fields are skipped (forward compatibility) once their extent is known to
 * be sound. It reads tags and lengths only: a tensor's bytes are stepped over, never touched.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { isUtf8 } from 'node:buffer';
import type { PackageDefinition } from '@grpc/proto-loader';

let inferenceSchema: WireSchema | undefined;

/** The KServe messages' wire schema: how a gateway checks the raw bytes it forwards. */
export function inferenceWireSchema(): WireSchema {
  if (!inferenceSchema) loadInferenceClient();
  return inferenceSchema as WireSchema;
}

/** proto/ at the repository root (this file runs from dist/protocol/). */
export const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

/**
 * keepCase: field names as in the .proto (raw_input_contents);
 * longs: String, so int64/uint64 values keep every digit;
 * enums: String, so DataType travels as 'TYPE_FP32';
 * defaults: absent fields read as their defaults ([] for repeated, {} for maps);
 * oneofs: a virtual field names which member of a oneof is set.
 */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

/**
 * Make every request deserializer of `service` in `definition` check the wire strictly first
 * (`WireSchema`, below), so that bytes that are not the request type throw, naming the field, instead
 * of decoding into a plausible message. Returns the schema, for readers of raw bytes (a gateway).
 */
function strictRequests(definition: protoLoader.PackageDefinition, pkg: string, service: string): WireSchema {
  const schema = new WireSchema(definition, pkg);
  for (const method of Object.values(definition[`${pkg}.${service}`] as protoLoader.ServiceDefinition)) {
    const type = `${pkg}.${(method.requestType.type as { name: string }).name}`;
    const decode = method.requestDeserialize;
    method.requestDeserialize = (bytes: Buffer) => {
      schema.check(bytes, type);
      return decode(bytes);
    };
  }
  return schema;
}

/** Stowage's control service (proto/control.proto), served beside the KServe one. */
export function loadControlClient(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync('control.proto', LOADER_OPTIONS);
  strictRequests(definition, 'stowage.control', 'ModelControl');
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    stowage: { control: { ModelControl: grpc.ServiceClientConstructor } };
  };
  return pkg.stowage.control.ModelControl;
}

/** The client constructor; its `.service` is the definition the server registers. */
export function loadInferenceClient(): grpc.ServiceClientConstructor {
  const definition = protoLoader.loadSync('grpc_service.proto', LOADER_OPTIONS);
  inferenceSchema = strictRequests(definition, 'inference', 'GRPCInferenceService');
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    inference: { GRPCInferenceService: grpc.ServiceClientConstructor };
  };
  return pkg.inference.GRPCInferenceService;
}

/*
 * Which decoded inference requests own the memory their tensor bytes sit in.
 *
 * grpc-js joins a message's HTTP/2 frames into one Buffer (its stream decoder concatenates the
 * 5-byte gRPC prefix and the message) and hands `subarray(5)` of it to the deserializer;
 * protobufjs decodes `bytes` fields as views of that Buffer. From half of `Buffer.poolSize` on
 * (4 KiB on Node 22, 32 KiB on Node 24), Buffer.concat allocates an ArrayBuffer of exactly the
 * framed message's size for it alone; below, the bytes sit in Node's shared pool beside other data. Nothing in grpc-js
 * touches the Buffer after deserializing, so when the geometry shows an ArrayBuffer of its own, the request's tensor
 * views can be handed to the device actor (transferred) as they are: no copy on the main thread.
 * In the pool, or in any shape we do not recognise, the codec copies as before.
 */
const owning = new WeakSet<object>();
/** grpc-js's message prefix (compressed flag and length) before the bytes it deserializes. */
const GRPC_PREFIX_BYTES = 5;

/**
 * Whether `bytes` is the whole of its (non-shared) ArrayBuffer but the `prefix` bytes before it.
 * A REST body (prefix 0) read in several chunks is joined into one of its own; a small one sits
 * in Node's pool and is not.
 */
export function ownsArrayBuffer(bytes: Buffer, prefix: number): boolean {
  const memory = bytes.buffer;
  return !(memory instanceof SharedArrayBuffer) && bytes.byteOffset === prefix && memory.byteLength === bytes.byteLength + prefix;
}

/** True when `request`'s bytes are views of an ArrayBuffer that belongs to it alone (see above). */
export function ownsItsBuffer(request: object): boolean {
  return owning.has(request);
}

/** The service definition with `methods`' request deserializers marking the requests that own their buffer. */
export function markOwnedBuffers(definition: grpc.ServiceDefinition, methods: readonly string[]): grpc.ServiceDefinition {
  const marked: Record<string, grpc.MethodDefinition<object, unknown>> = { ...definition };
  for (const name of methods) {
    const method = definition[name];
    const deserialize = method.requestDeserialize;
    marked[name] = {
      ...method,
      requestDeserialize: (message: Buffer) => {
        const request = deserialize(message);
        if (ownsArrayBuffer(message, GRPC_PREFIX_BYTES)) owning.add(request);
        return request;
      },
    };
  }
  return marked as grpc.ServiceDefinition;
}

interface FieldDescriptor {
  name: string;
  number: number;
  label: string;
  type: string;
  typeName: string;
}

interface MessageDescriptor {
  name: string;
  field: FieldDescriptor[];
  nestedType: MessageDescriptor[];
  options?: { mapEntry?: boolean } | null;
}

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;

const WIRE_OF: Record<string, number> = {
  TYPE_DOUBLE: I64, TYPE_FIXED64: I64, TYPE_SFIXED64: I64,
  TYPE_FLOAT: I32, TYPE_FIXED32: I32, TYPE_SFIXED32: I32,
  TYPE_INT32: VARINT, TYPE_INT64: VARINT, TYPE_UINT32: VARINT, TYPE_UINT64: VARINT,
  TYPE_SINT32: VARINT, TYPE_SINT64: VARINT, TYPE_BOOL: VARINT, TYPE_ENUM: VARINT,
  TYPE_STRING: LEN, TYPE_BYTES: LEN, TYPE_MESSAGE: LEN,
};

const WIRE_NAMES = ['varint', '64-bit', 'length-delimited', 'group start', 'group end', '32-bit', 'wire type 6', 'wire type 7'];

interface FieldCheck {
  name: string;
  wire: number;
  /** A repeated scalar: may also come packed, as one length-delimited run. */
  packable: boolean;
  utf8: boolean;
  /** A sub-message's check, resolved on first use (types may refer to each other). */
  message?: () => MessageCheck;
}

interface MessageCheck {
  fields: Map<number, FieldCheck>;
  /**
   * A map entry whose value is a message: the value must be there. (The wire allows it absent,
   * meaning empty, but protobufjs then throws a TypeError; and a parameter without a value means
   * nothing.)
   */
  needsValue: boolean;
}

/** Thrown for bytes that are not a message of the type: says which field, at which byte, and why. */
export class WireError extends Error {}

/** The byte after the varint at `at`, or -1 when it is cut short or longer than 10 bytes. */
function varintEnd(buf: Uint8Array, at: number, end: number): number {
  for (let i = at; i < end && i < at + 10; i++) {
    if ((buf[i] & 0x80) === 0) return i + 1;
  }
  return -1;
}

/** readLength's value (a module scratch rather than a tuple per tag and per length). */
let lengthValue = 0;

/**
 * Read a varint that must fit a tag or a length (below 2^32, as every length in a 2 GiB message
 * is) into lengthValue. Returns the byte after it, -1 when it is cut short or over-long, -2 when
 * it is too large.
 */
function readLength(buf: Uint8Array, at: number, end: number): number {
  let value = 0;
  let scale = 1;
  for (let i = at; i < end && i < at + 10; i++) {
    const b = buf[i];
    value += (b & 0x7f) * scale;
    if ((b & 0x80) === 0) {
      lengthValue = value;
      return value > 0xffffffff ? -2 : i + 1;
    }
    scale *= 128;
  }
  return -1;
}

function badVarint(what: string, at: number, result: number): WireError {
  return new WireError(result === -2
    ? `${what} at byte ${at} is ${lengthValue}, more than any message holds`
    : `${what} at byte ${at} is a truncated or over-long varint`);
}

export class WireSchema {
  readonly #package: string;
  readonly #types = new Map<string, MessageDescriptor>();
  readonly #checks = new Map<string, MessageCheck>();

  /** `definition`: what proto-loader loaded; `pkg`: its package (for relative type names). */
  constructor(definition: PackageDefinition, pkg: string) {
    this.#package = pkg;
    for (const [name, entry] of Object.entries(definition)) {
      const type = (entry as { type?: MessageDescriptor }).type;
      if (type && Array.isArray(type.field)) this.#index(name, type);
    }
  }

  #index(fullName: string, type: MessageDescriptor): void {
    this.#types.set(fullName, type);
    for (const nested of type.nestedType ?? []) this.#index(`${fullName}.${nested.name}`, nested);
  }

  /** The full name `typeName` means inside `scope` (a message's full name): innermost scope first. */
  #resolve(typeName: string, scope: string): string {
    for (let s = scope; s; s = s.includes('.') ? s.slice(0, s.lastIndexOf('.')) : '') {
      if (this.#types.has(`${s}.${typeName}`)) return `${s}.${typeName}`;
    }
    if (this.#types.has(typeName)) return typeName;
    if (this.#types.has(`${this.#package}.${typeName}`)) return `${this.#package}.${typeName}`;
    throw new Error(`wire schema: type ${typeName} (in ${scope}) is not in the loaded protos`);
  }

  #checkFor(fullName: string): MessageCheck {
    let check = this.#checks.get(fullName);
    if (check) return check;
    const type = this.#types.get(fullName);
    if (!type) throw new Error(`wire schema: no message type ${fullName}`);
    check = { fields: new Map(), needsValue: Boolean(type.options?.mapEntry) && type.field.some((f) => f.number === 2 && f.type === 'TYPE_MESSAGE') };
    this.#checks.set(fullName, check);
    for (const f of type.field) {
      const wire = WIRE_OF[f.type];
      if (wire === undefined) throw new Error(`wire schema: ${fullName}.${f.name} has type ${f.type}, which this check does not know`);
      const nested = f.type === 'TYPE_MESSAGE' ? this.#resolve(f.typeName, fullName) : undefined;
      check.fields.set(f.number, {
        name: f.name,
        wire,
        packable: f.label === 'LABEL_REPEATED' && wire !== LEN,
        utf8: f.type === 'TYPE_STRING',
        ...(nested ? { message: this.#lazy(nested) } : {}),
      });
    }
    return check;
  }

  #lazy(fullName: string): () => MessageCheck {
    let check: MessageCheck | undefined;
    return () => (check ??= this.#checkFor(fullName));
  }

  /** Throw a WireError unless `bytes` are a well-formed `typeName` (a full name: `inference.ModelInferRequest`). */
  check(bytes: Uint8Array, typeName: string): void {
    this.#walk(bytes, 0, bytes.length, this.#checkFor(typeName), '');
  }

  #walk(buf: Uint8Array, start: number, end: number, message: MessageCheck, path: string): void {
    const fields = message.fields;
    let valueSeen = false;
    let at = start;
    while (at < end) {
      const afterTag = readLength(buf, at, end);
      if (afterTag < 0) throw badVarint(`${path || 'the message'}: a tag`, at, afterTag);
      const number = Math.floor(lengthValue / 8);
      const wire = lengthValue & 7;
      const field = fields.get(number);
      // Built only for an error: a valid request pays no string work per field.
      const name = () => (field ? `${path}${field.name}` : `${path}field ${number}`);
      if (number === 2) valueSeen = true;
      if (number === 0) throw new WireError(`${path || 'the message'}: field number 0 at byte ${at} (field numbers start at 1)`);
      if (field && wire !== field.wire && !(field.packable && wire === LEN)) {
        throw new WireError(`${name()} at byte ${at} is ${WIRE_NAMES[wire]}, but the field is ${WIRE_NAMES[field.wire]}`);
      }
      switch (wire) {
        case VARINT:
          at = varintEnd(buf, afterTag, end);
          if (at < 0) throw badVarint(name(), afterTag, at);
          break;
        case I64:
        case I32:
          at = afterTag + (wire === I64 ? 8 : 4);
          if (at > end) throw new WireError(`${name()} at byte ${afterTag} runs past the end of its message`);
          break;
        case LEN: {
          const payload = readLength(buf, afterTag, end);
          if (payload < 0) throw badVarint(`${name()}: its length`, afterTag, payload);
          const length = lengthValue;
          at = payload + length;
          if (at > end) throw new WireError(`${name()} at byte ${afterTag} claims ${length} bytes, but its message has ${end - payload} left`);
          if (!field) break;
          if (field.message) this.#walk(buf, payload, at, field.message(), `${name()}.`);
          else if (field.utf8 && !isText(buf, payload, at)) throw new WireError(`${name()} at byte ${payload} is not valid UTF-8`);
          else if (field.packable) checkPacked(buf, payload, at, field, name);
          break;
        }
        default:
          throw new WireError(`${name()} at byte ${at} has ${WIRE_NAMES[wire]}, which a proto3 message never uses`);
      }
    }
    if (message.needsValue && !valueSeen) throw new WireError(`${path.slice(0, -1)}: an entry at byte ${start} has a key but no value`);
  }
}

/** Whether bytes are UTF-8: names are short and ASCII, checked here faster than a call into C++ would be. */
function isText(buf: Uint8Array, start: number, end: number): boolean {
  if (end - start > 64) return isUtf8(buf.subarray(start, end));
  for (let i = start; i < end; i++) {
    if (buf[i] >= 0x80) return isUtf8(buf.subarray(start, end));
  }
  return true;
}

/** A packed run of scalars: whole elements only. */
function checkPacked(buf: Uint8Array, start: number, end: number, field: FieldCheck, name: () => string): void {
  if (field.wire === VARINT) {
    for (let at = start; at < end;) {
      const next = varintEnd(buf, at, end);
      if (next < 0) throw badVarint(`${name()}: an element`, at, next);
      at = next;
    }
  } else {
    const width = field.wire === I64 ? 8 : 4;
    if ((end - start) % width !== 0) throw new WireError(`${name()} at byte ${start} holds ${end - start} bytes, not a whole number of ${width}-byte elements`);
  }
}

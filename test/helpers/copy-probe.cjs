// Test-only: counts the copies of large byte ranges that JavaScript makes, in every thread of a
// server started with `node --require test/helpers/copy-probe.cjs main.js ...` (a --require
// preload runs in worker threads too; --import does not). With STOWAGE_COPY_PROBE set to a file,
// each copy of at least STOWAGE_COPY_PROBE_MIN_BYTES bytes appends one line to it:
//
//   <thread id> <operation> <bytes> <where: the first frames outside this file>
//
// It wraps the copying primitives the request path uses, on their prototypes and classes:
// TypedArray#set, TypedArray#slice, TypedArray.from, ArrayBuffer#slice, Buffer.concat, Buffer#copy
// and Buffer.from of an array or view. Node's own internals copy through primordials captured
// before this runs, so they are not counted twice (Buffer.concat counts once, not once per part).
// What it cannot see: copies in C++ (onnxruntime-node's outputs, HTTP/2 framing) and
// `new TypedArray(otherTypedArray)`, so the server's code copies with `.set` or `.slice` (and marks
// each `// copy:`), never with that constructor. test/integration/copies.test.js reads the lines.
'use strict';
const { appendFileSync } = require('node:fs');
const { threadId } = require('node:worker_threads');

const file = process.env.STOWAGE_COPY_PROBE;
const minBytes = Number(process.env.STOWAGE_COPY_PROBE_MIN_BYTES ?? 65536);

/** The frames of the stack that are not this file's, for a reader working out where a copy is. */
function where() {
  const frames = (new Error().stack ?? '').split('\n').slice(1).map((l) => l.trim()).filter((l) => !l.includes('copy-probe.cjs'));
  return frames.slice(0, 3).map((l) => l.replace(/^at /, '').replace(/\(?(file:\/\/)?\/[^ ]*\/(dist|node_modules)\//, '$2/')).join(' < ');
}

let inside = false;
function record(operation, bytes) {
  if (inside || !(bytes >= minBytes)) return;
  inside = true; // appendFileSync copies small buffers of its own: never count those
  try {
    appendFileSync(file, `${threadId} ${operation} ${bytes} ${where()}\n`);
  } finally {
    inside = false;
  }
}

/** Replace `owner[name]` with `wrap(original)`, keeping its name (protobufjs checks `Buffer.prototype.set.name`). */
function patch(owner, name, wrap) {
  const original = owner[name];
  const wrapped = wrap(original);
  Object.defineProperty(wrapped, 'name', { value: original.name });
  Object.defineProperty(owner, name, { value: wrapped, writable: true, configurable: true, enumerable: false });
}

const bytesOf = (source, element) => (ArrayBuffer.isView(source) ? source.byteLength : (source?.length ?? 0) * element);

if (file) {
  const TypedArray = Object.getPrototypeOf(Uint8Array);
  patch(TypedArray.prototype, 'set', (set) => function (source, offset) {
    record('TypedArray#set', bytesOf(source, this.BYTES_PER_ELEMENT));
    return Reflect.apply(set, this, arguments);
  });
  patch(TypedArray.prototype, 'slice', (slice) => function () {
    const out = Reflect.apply(slice, this, arguments);
    record('TypedArray#slice', out.byteLength);
    return out;
  });
  patch(TypedArray, 'from', (from) => function () {
    const out = Reflect.apply(from, this, arguments);
    record('TypedArray.from', out.byteLength);
    return out;
  });
  for (const Buffers of [ArrayBuffer, SharedArrayBuffer]) {
    patch(Buffers.prototype, 'slice', (slice) => function () {
      const out = Reflect.apply(slice, this, arguments);
      record(`${Buffers.name}#slice`, out.byteLength);
      return out;
    });
  }
  patch(Buffer, 'concat', (concat) => function () {
    const out = Reflect.apply(concat, this, arguments);
    record('Buffer.concat', out.length);
    return out;
  });
  patch(Buffer.prototype, 'copy', (copy) => function () {
    const copied = Reflect.apply(copy, this, arguments);
    record('Buffer#copy', copied);
    return copied;
  });
  patch(Buffer, 'from', (from) => function (value) {
    const out = Reflect.apply(from, this, arguments);
    if (ArrayBuffer.isView(value) || Array.isArray(value)) record('Buffer.from', out.length);
    return out;
  });
}

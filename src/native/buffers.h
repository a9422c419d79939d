// The bytes of a JavaScript buffer as the binding reads them: one check for every function that
// takes one (tensors, copies, pinning), so each refuses the same things with the same words.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace stowage {

// The bytes of an ArrayBuffer or a view of one, with the object that keeps them alive (the view
// itself, for a view: a given output comes back as the same object).
struct Bytes {
  uint8_t* data = nullptr;
  size_t length = 0;
  Napi::Object holder;
};

// `value`'s bytes; refuses (ArgumentError naming `what`) anything but an ArrayBuffer, a typed
// array or a DataView, and a detached (transferred) buffer. A SharedArrayBuffer is reached through
// a view of it (N-API has no accessor for one).
Bytes bytesOf(const Napi::Value& value, const std::string& what);

}  // namespace stowage

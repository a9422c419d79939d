// The bytes of a JavaScript buffer (buffers.h).
#include "buffers.h"

#include "failure.h"

namespace stowage {

Bytes bytesOf(const Napi::Value& value, const std::string& what) {
  Bytes b;
  if (value.IsArrayBuffer()) {
    Napi::ArrayBuffer ab = value.As<Napi::ArrayBuffer>();
    if (ab.IsDetached()) throw ArgumentError(what + ": its ArrayBuffer is detached (transferred away)");
    b.data = static_cast<uint8_t*>(ab.Data());
    b.length = ab.ByteLength();
    b.holder = ab;
    return b;
  }
  if (value.IsTypedArray() || value.IsDataView()) {
    napi_env e = value.Env();
    void* data = nullptr;
    size_t length = 0;
    napi_value buffer;
    size_t offset = 0;
    if (value.IsTypedArray()) {
      napi_typedarray_type type;
      size_t count;
      if (napi_get_typedarray_info(e, value, &type, &count, &data, &buffer, &offset) != napi_ok) throw ArgumentError(what + ": unreadable typed array");
      length = Napi::TypedArray(e, value).ByteLength();
    } else {
      if (napi_get_dataview_info(e, value, &length, &data, &buffer, &offset) != napi_ok) throw ArgumentError(what + ": unreadable DataView");
    }
    bool detached = false;
    napi_is_detached_arraybuffer(e, buffer, &detached);
    if (detached) throw ArgumentError(what + ": its ArrayBuffer is detached (transferred away)");
    b.data = static_cast<uint8_t*>(data);
    b.length = length;
    b.holder = value.As<Napi::Object>();
    return b;
  }
  throw ArgumentError(what + ": data must be an ArrayBuffer or a view of one (for a SharedArrayBuffer, a view of it)");
}

}  // namespace stowage

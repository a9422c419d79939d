// Stowage's binding over ONNX Runtime's C API (ort.ts types and documents it).
//
// It loads the very libonnxruntime.so.1 that onnxruntime-node installs (dlopen of the path the
// caller gives, so the process holds one ONNX Runtime) and asks it for the C API table of the
// version the header declares (OrtGetApiBase()->GetApi(ORT_API_VERSION)). What it adds over
// onnxruntime-node's JavaScript API:
//   - tensors over memory the caller owns (any ArrayBuffer or view: staging, shared-memory
//     mappings, the weight arena), read and written in place;
//   - runs with inputs and outputs bound (IoBinding): an output given a buffer is written there by
//     ONNX Runtime and never copied; one of unknown shape is allocated by ONNX Runtime and handed
//     over as an ArrayBuffer over its memory, released when that buffer is collected;
//   - inputs bound once and kept (a weightless session's weights), per session;
//   - runs on a libuv thread, resolving a promise, so the calling thread keeps taking messages;
//     a run in flight can be terminated;
//   - errors as JavaScript errors carrying ONNX Runtime's code and message; bad arguments are
//     refused before anything reaches ONNX Runtime.
//
// Ownership: a tensor handed to `run` or `bindInput` must not be detached (transferred) while a
// run may read or write it: the session keeps a reference to every buffer it uses, which keeps it
// from being collected, but cannot stop a transfer. A session released while a run is in flight
// is released when the run ends.
#include <dlfcn.h>
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda.h"
#include "onnxruntime_c_api.h"

namespace {

const OrtApi* ort = nullptr;
OrtEnv* env = nullptr;
OrtMemoryInfo* cpu = nullptr;
OrtAllocator* allocator = nullptr;
std::string loadedFrom;
std::string version;
std::mutex initMutex;
// Whether the environment has process-wide thread pools that sessions may share.
bool globalPools = false;

// An ONNX Runtime failure, kept as its code and message until it reaches JavaScript.
struct OrtFailure : std::runtime_error {
  OrtErrorCode code;
  OrtFailure(OrtErrorCode c, const std::string& message) : std::runtime_error(message), code(c) {}
};

// A refusal of the caller's arguments, before ONNX Runtime sees them.
struct ArgumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(OrtStatus* status) {
  if (!status) return;
  OrtErrorCode code = ort->GetErrorCode(status);
  std::string message = ort->GetErrorMessage(status);
  ort->ReleaseStatus(status);
  throw OrtFailure(code, message);
}

const char* codeName(OrtErrorCode code) {
  switch (code) {
    case ORT_FAIL: return "ORT_FAIL";
    case ORT_INVALID_ARGUMENT: return "ORT_INVALID_ARGUMENT";
    case ORT_NO_SUCHFILE: return "ORT_NO_SUCHFILE";
    case ORT_NO_MODEL: return "ORT_NO_MODEL";
    case ORT_ENGINE_ERROR: return "ORT_ENGINE_ERROR";
    case ORT_RUNTIME_EXCEPTION: return "ORT_RUNTIME_EXCEPTION";
    case ORT_INVALID_PROTOBUF: return "ORT_INVALID_PROTOBUF";
    case ORT_MODEL_LOADED: return "ORT_MODEL_LOADED";
    case ORT_NOT_IMPLEMENTED: return "ORT_NOT_IMPLEMENTED";
    case ORT_INVALID_GRAPH: return "ORT_INVALID_GRAPH";
    case ORT_EP_FAIL: return "ORT_EP_FAIL";
    default: return "ORT_ERROR";
  }
}

Napi::Error toJs(Napi::Env jsEnv, const std::exception& err) {
  Napi::Error e = Napi::Error::New(jsEnv, err.what());
  if (auto failure = dynamic_cast<const OrtFailure*>(&err)) {
    e.Set("code", Napi::String::New(jsEnv, codeName(failure->code)));
  } else if (dynamic_cast<const ArgumentError*>(&err)) {
    e.Set("code", Napi::String::New(jsEnv, "ERR_ORT_ARGUMENT"));
  } else {
    e.Set("code", Napi::String::New(jsEnv, "ERR_ORT_BINDING"));
  }
  return e;
}

void requireInit() {
  if (!ort) throw ArgumentError("the ONNX Runtime binding is not initialised: call init(libraryPath) first");
}

// Bytes of one element of an ONNX tensor element type; 0 for types this binding does not hold
// (strings are held apart, as length-prefixed elements).
size_t elementBytes(int type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return 8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return 8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: return 8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return 2;
    default: return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Arguments from JavaScript

std::vector<int64_t> dimsOf(const Napi::Value& value, const std::string& what) {
  if (!value.IsArray()) throw ArgumentError(what + ": dims must be an array of sizes");
  Napi::Array array = value.As<Napi::Array>();
  if (array.Length() > 64) throw ArgumentError(what + ": more than 64 dims");
  std::vector<int64_t> dims;
  for (uint32_t i = 0; i < array.Length(); i++) {
    Napi::Value d = array.Get(i);
    if (!d.IsNumber()) throw ArgumentError(what + ": dim " + std::to_string(i) + " is not a number");
    double n = d.As<Napi::Number>().DoubleValue();
    if (!(n >= 0) || n > 9007199254740991.0 || n != static_cast<double>(static_cast<int64_t>(n))) {
      throw ArgumentError(what + ": dim " + std::to_string(i) + " must be a whole number from 0 to 2^53-1");
    }
    dims.push_back(static_cast<int64_t>(n));
  }
  return dims;
}

// Elements of a shape, refusing overflow.
size_t elementsOf(const std::vector<int64_t>& dims, const std::string& what) {
  size_t n = 1;
  for (int64_t d : dims) {
    if (d != 0 && n > SIZE_MAX / static_cast<size_t>(d)) throw ArgumentError(what + ": the shape holds too many elements");
    n *= static_cast<size_t>(d);
  }
  return n;
}

// A JavaScript number that is a whole count of bytes a size_t holds exactly (checked before any cast).
bool wholeBytes(double v) {
  return v >= 0 && v <= 9007199254740991.0 && std::floor(v) == v;
}

// An optional byte offset (undefined: 0), refused unless a whole number of bytes.
size_t offsetOf(const Napi::Value& v, const std::string& what) {
  double offset = v.IsUndefined() ? 0 : (v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1);
  if (!wholeBytes(offset)) throw ArgumentError(what + ": offset must be a whole number of bytes, 0 or more");
  return static_cast<size_t>(offset);
}

// The bytes of an ArrayBuffer or a view of one, with the object that keeps them alive.
struct Bytes {
  uint8_t* data = nullptr;
  size_t length = 0;
  Napi::Object holder;
};

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
    // The view itself: it keeps its buffer alive, and a given output comes back as the same object.
    b.holder = value.As<Napi::Object>();
    return b;
  }
  throw ArgumentError(what + ": data must be an ArrayBuffer or a view of one");
}

// Length-prefixed elements (4-byte little-endian length, then the bytes): KServe's BYTES layout.
std::vector<std::string> splitElements(const Bytes& b, size_t count, const std::string& what) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < b.length) {
    if (b.length - at < 4) throw ArgumentError(what + ": BYTES data ends inside an element's length");
    uint32_t n = static_cast<uint32_t>(b.data[at]) | (static_cast<uint32_t>(b.data[at + 1]) << 8) |
                 (static_cast<uint32_t>(b.data[at + 2]) << 16) | (static_cast<uint32_t>(b.data[at + 3]) << 24);
    at += 4;
    if (n > b.length - at) throw ArgumentError(what + ": a BYTES element claims more bytes than remain");
    out.emplace_back(reinterpret_cast<const char*>(b.data + at), n);
    at += n;
  }
  if (out.size() != count) throw ArgumentError(what + ": shape needs " + std::to_string(count) + " BYTES elements, data holds " + std::to_string(out.size()));
  return out;
}

// Memory on a device, which JavaScript cannot read: filled and read back by explicit copies. On
// the CPU it comes from ONNX Runtime's allocator; on a GPU from cudaMalloc (ONNX Runtime's CUDA
// allocator belongs to a session, and this memory outlives sessions: the weight cache binds it to
// every session of the models it holds). Every tensor over it holds a reference, so it is freed
// only once nothing can read or write it.
struct DeviceBlock {
  OrtAllocator* allocator = nullptr;  // the CPU's
  int cudaOrdinal = -1;               // or a GPU's
  const OrtMemoryInfo* info = nullptr;
  std::string device;
  void* data = nullptr;
  size_t bytes = 0;
  ~DeviceBlock() {
    if (!data) return;
    if (allocator && ort) allocator->Free(allocator, data);
    else if (cudaOrdinal >= 0) {
      if (const stowage_cuda::Runtime* rt = stowage_cuda::runtime()) {
        rt->setDevice(cudaOrdinal);
        rt->free(data);
      }
    }
  }
};

// ONNX Runtime's description of memory on CUDA device `ordinal`, made once per device.
const OrtMemoryInfo* cudaMemoryInfo(int ordinal) {
  static std::mutex mutex;
  static std::unordered_map<int, OrtMemoryInfo*> infos;
  std::lock_guard<std::mutex> lock(mutex);
  auto at = infos.find(ordinal);
  if (at != infos.end()) return at->second;
  OrtMemoryInfo* info = nullptr;
  check(ort->CreateMemoryInfo("Cuda", OrtDeviceAllocator, ordinal, OrtMemTypeDefault, &info));
  infos[ordinal] = info;
  return info;
}

// An OrtValue and what keeps the memory it views alive: the JavaScript object (host memory) or
// the device block (none for ONNX Runtime's own).
struct Held {
  OrtValue* value = nullptr;
  Napi::ObjectReference keep;
  std::shared_ptr<DeviceBlock> block;
  Held() = default;
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  Held(Held&& o) noexcept : value(o.value), keep(std::move(o.keep)), block(std::move(o.block)) { o.value = nullptr; }
  Held& operator=(Held&& o) noexcept {
    if (this != &o) {
      reset();
      value = o.value;
      keep = std::move(o.keep);
      block = std::move(o.block);
      o.value = nullptr;
    }
    return *this;
  }
  void reset() {
    if (value) ort->ReleaseValue(value);
    value = nullptr;
    if (!keep.IsEmpty()) keep.Reset();
    block.reset();
  }
  ~Held() {
    if (value && ort) ort->ReleaseValue(value);
  }
};

// The block of a DeviceMemory object (tagged as one when made), or null.
std::shared_ptr<DeviceBlock>* blockOf(const Napi::Object& o);

// A tensor over device memory: `data` is `{ memory: DeviceMemory, offset }`, numeric types only.
Held deviceTensorOf(const Napi::Object& data, int type, const std::vector<int64_t>& dims, size_t count, const std::string& what) {
  Napi::Value m = data.Get("memory");
  std::shared_ptr<DeviceBlock>* block = m.IsObject() ? blockOf(m.As<Napi::Object>()) : nullptr;
  if (!block) throw ArgumentError(what + ": data must be an ArrayBuffer, a view of one, or { memory: DeviceMemory, offset }");
  if (!*block) throw ArgumentError(what + ": its device memory has been released");
  if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) throw ArgumentError(what + ": a BYTES tensor cannot live in device memory");
  size_t width = elementBytes(type);
  if (width == 0) throw ArgumentError(what + ": element type " + std::to_string(type) + " is not one this binding holds");
  const DeviceBlock& d = **block;
  size_t at = offsetOf(data.Get("offset"), what);
  if (at > d.bytes) throw ArgumentError(what + ": offset " + std::to_string(at) + " is past the device memory's " + std::to_string(d.bytes) + " bytes");
  if (count > SIZE_MAX / width || count * width > d.bytes - at) {
    throw ArgumentError(what + ": shape and type need " + std::to_string(count) + " elements of " + std::to_string(width) + " bytes; the device memory has " + std::to_string(d.bytes - at) + " bytes from offset " + std::to_string(at));
  }
  if (at % width != 0) throw ArgumentError(what + ": offset " + std::to_string(at) + " is not aligned for its element type (" + std::to_string(width) + " bytes)");
  Held held;
  static uint64_t empty = 0;
  void* p = count ? static_cast<void*>(static_cast<uint8_t*>(d.data) + at) : static_cast<void*>(&empty);
  check(ort->CreateTensorWithDataAsOrtValue(d.info, p, count * width, dims.data(), dims.size(), static_cast<ONNXTensorElementDataType>(type), &held.value));
  held.block = *block;
  // The slice object itself: a given output comes back as it was given.
  held.keep = Napi::Persistent(data);
  return held;
}

// A tensor `{ name, type, dims, data }` as an OrtValue over `data` (numeric types: in place;
// strings: ONNX Runtime's own copy of the elements).
Held tensorOf(const Napi::Object& t, const std::string& what) {
  Napi::Value typeValue = t.Get("type");
  if (!typeValue.IsNumber()) throw ArgumentError(what + ": type must be an ONNX tensor element type (a number)");
  int type = typeValue.As<Napi::Number>().Int32Value();
  std::vector<int64_t> dims = dimsOf(t.Get("dims"), what);
  size_t count = elementsOf(dims, what);
  Napi::Value data = t.Get("data");
  if (data.IsObject() && !data.IsArrayBuffer() && !data.IsTypedArray() && !data.IsDataView()) return deviceTensorOf(data.As<Napi::Object>(), type, dims, count, what);
  Bytes b = bytesOf(data, what);
  Held held;
  if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
    std::vector<std::string> elements = splitElements(b, count, what);
    std::vector<const char*> pointers;
    for (const std::string& s : elements) pointers.push_back(s.c_str());
    check(ort->CreateTensorAsOrtValue(allocator, dims.data(), dims.size(), ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, &held.value));
    // Elements may hold NUL bytes: fill each with its length, not as C strings.
    for (size_t i = 0; i < elements.size(); i++) {
      char* into = nullptr;
      check(ort->GetResizedStringTensorElementBuffer(held.value, i, elements[i].size(), &into));
      if (!elements[i].empty()) std::memcpy(into, elements[i].data(), elements[i].size());
    }
    return held;
  }
  size_t width = elementBytes(type);
  if (width == 0) throw ArgumentError(what + ": element type " + std::to_string(type) + " is not one this binding holds");
  if (count > SIZE_MAX / width || count * width != b.length) {
    throw ArgumentError(what + ": shape and type need " + std::to_string(count) + " elements of " + std::to_string(width) + " bytes, data has " + std::to_string(b.length) + " bytes");
  }
  if (reinterpret_cast<uintptr_t>(b.data) % width != 0) throw ArgumentError(what + ": data is not aligned for its element type (" + std::to_string(width) + " bytes)");
  // ONNX Runtime refuses a null pointer even for an empty tensor: point it at a byte of our own.
  static uint64_t empty = 0;
  void* p = b.length ? static_cast<void*>(b.data) : static_cast<void*>(&empty);
  check(ort->CreateTensorWithDataAsOrtValue(cpu, p, b.length, dims.data(), dims.size(), static_cast<ONNXTensorElementDataType>(type), &held.value));
  held.keep = Napi::Persistent(b.holder);
  return held;
}

std::string nameOf(const Napi::Object& t, const std::string& what) {
  Napi::Value v = t.Get("name");
  if (!v.IsString()) throw ArgumentError(what + ": name must be a string");
  return v.As<Napi::String>().Utf8Value();
}

// ---------------------------------------------------------------------------------------------
// Output tensors back to JavaScript

// The shape and element type of a value ONNX Runtime made.
void shapeOf(const OrtValue* value, int& type, std::vector<int64_t>& dims) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(ort->GetTensorTypeAndShape(value, &info));
  ONNXTensorElementDataType t;
  size_t n = 0;
  OrtStatus* s = ort->GetTensorElementType(info, &t);
  if (!s) s = ort->GetDimensionsCount(info, &n);
  dims.assign(n, 0);
  if (!s && n) s = ort->GetDimensions(info, dims.data(), n);
  ort->ReleaseTensorTypeAndShapeInfo(info);
  check(s);
  type = static_cast<int>(t);
}

// A string tensor's elements in KServe's BYTES layout: a conversion, since ONNX Runtime holds
// them as its own strings.
std::vector<uint8_t> joinElements(const OrtValue* value) {
  size_t count = 0;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check(ort->GetTensorTypeAndShape(value, &info));
  OrtStatus* s = ort->GetTensorShapeElementCount(info, &count);
  ort->ReleaseTensorTypeAndShapeInfo(info);
  check(s);
  std::vector<uint8_t> out;
  for (size_t i = 0; i < count; i++) {
    size_t length = 0;
    check(ort->GetStringTensorElementLength(value, i, &length));
    size_t at = out.size();
    out.resize(at + 4 + length);
    out[at] = length & 0xff;
    out[at + 1] = (length >> 8) & 0xff;
    out[at + 2] = (length >> 16) & 0xff;
    out[at + 3] = (length >> 24) & 0xff;
    if (length) check(ort->GetStringTensorElement(value, length, i, out.data() + at + 4));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Sessions

class Session;

// What a run holds until it ends: the values bound for it and the objects whose memory they view.
struct RunState {
  std::vector<Held> inputs;
  std::vector<std::pair<std::string, Held>> outputs;  // given buffers (value set) or to be allocated (value null)
  std::vector<std::string> outputNames;
  OrtRunOptions* options = nullptr;
  ~RunState() {
    if (options && ort) ort->ReleaseRunOptions(options);
  }
};

class RunWorker;

class Session : public Napi::ObjectWrap<Session> {
 public:
  static Napi::Function Define(Napi::Env e) {
    return DefineClass(e, "Session", {
      InstanceMethod("inputs", &Session::Inputs),
      InstanceMethod("outputs", &Session::Outputs),
      InstanceMethod("bindInput", &Session::BindInput),
      InstanceMethod("unbindInputs", &Session::UnbindInputs),
      InstanceMethod("run", &Session::Run),
      InstanceMethod("runSync", &Session::RunSync),
      InstanceMethod("terminate", &Session::Terminate),
      InstanceMethod("release", &Session::Release),
      InstanceMethod("providerOptions", &Session::ProviderOptions),
    });
  }

  // new Session(model: string | Uint8Array, options)
  explicit Session(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Session>(info) {
    Napi::Env e = info.Env();
    try {
      requireInit();
      if (info.Length() < 2 || !info[1].IsObject()) throw ArgumentError("new Session(model, options): options must be an object");
      Napi::Object options = info[1].As<Napi::Object>();
      OrtSessionOptions* so = nullptr;
      check(ort->CreateSessionOptions(&so));
      std::unique_ptr<OrtSessionOptions, void (*)(OrtSessionOptions*)> guard(so, [](OrtSessionOptions* p) { ort->ReleaseSessionOptions(p); });
      providerOptions_ = configure(so, options);
      profiling_ = options.Get("profilePrefix").IsString();
      // Initializers over the caller's memory. `initializers` (AddInitializer): ONNX Runtime uses
      // each in place instead of the model's initializer of that name, so it must outlive the
      // session (kept below); constant, so ONNX Runtime may prepack it. `externalInitializers`
      // (AddExternalInitializers): each replaces an initializer the model stores as external
      // data, copied into the session (the caller's memory is free again once it is made).
      std::vector<Held> initializers = initializersOf(so, options, "initializers", false);
      std::vector<Held> copied = initializersOf(so, options, "externalInitializers", true);  // alive until the session is made
      if (info[0].IsString()) {
        std::string path = info[0].As<Napi::String>().Utf8Value();
        check(ort->CreateSession(env, path.c_str(), so, &session_));
      } else {
        Bytes model = bytesOf(info[0], "model");
        check(ort->CreateSessionFromArray(env, model.data, model.length, so, &session_));
      }
      // The initializers' memory must outlive the session: keep their holders.
      initializers_ = std::move(initializers);
      check(ort->CreateIoBinding(session_, &binding_));
      size_t count = 0;
      check(ort->SessionGetInputCount(session_, &count));
      for (size_t i = 0; i < count; i++) {
        char* name = nullptr;
        check(ort->SessionGetInputName(session_, i, allocator, &name));
        inputNames_.emplace_back(name);
        allocator->Free(allocator, name);
      }
      check(ort->SessionGetOutputCount(session_, &count));
      for (size_t i = 0; i < count; i++) {
        char* name = nullptr;
        check(ort->SessionGetOutputName(session_, i, allocator, &name));
        outputNames_.emplace_back(name);
        allocator->Free(allocator, name);
      }
    } catch (const std::exception& err) {
      close();
      throw toJs(e, err);
    }
  }

  ~Session() override { close(); }

  bool busy() const { return running_; }

  OrtSession* session_ = nullptr;
  OrtIoBinding* binding_ = nullptr;
  bool running_ = false;
  bool releasing_ = false;
  std::vector<Held> initializers_;
  // The CUDA provider's options as ONNX Runtime took them ("" on the CPU).
  std::string providerOptions_;
  // Whether ONNX Runtime profiles this session (its JSON is written at release).
  bool profiling_ = false;
  // Inputs bound once and kept (weights), by name.
  std::unordered_map<std::string, Held> kept_;
  // Every input the graph takes: a run must bind each one that is not kept, since a binding left
  // from an earlier run may view memory that is gone.
  std::vector<std::string> inputNames_;
  std::vector<std::string> outputNames_;

  // ONNX Runtime's binding is left inconsistent by a bind it refuses: names are checked here
  // first, and after any refusal the binding is made anew with the kept inputs.
  void requireName(const std::vector<std::string>& names, const std::string& name, const char* side) const {
    for (const std::string& n : names) if (n == name) return;
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    throw ArgumentError(std::string("the graph has no ") + side + " named \"" + name + "\" (its " + side + "s: " + all + ")");
  }

  void rebuildBinding() {
    if (binding_) ort->ReleaseIoBinding(binding_);
    binding_ = nullptr;
    check(ort->CreateIoBinding(session_, &binding_));
    for (auto& [name, held] : kept_) check(ort->BindInput(binding_, name.c_str(), held.value));
  }

  void close() {
    if (session_ && profiling_) {
      // Write the profile (ONNX Runtime writes it only when asked or as the session ends).
      char* file = nullptr;
      OrtStatus* s = ort->SessionEndProfiling(session_, allocator, &file);
      if (s) ort->ReleaseStatus(s);
      if (file) allocator->Free(allocator, file);
    }
    if (binding_) ort->ReleaseIoBinding(binding_);
    binding_ = nullptr;
    if (session_) ort->ReleaseSession(session_);
    session_ = nullptr;
    for (auto& [name, held] : kept_) held.reset();
    kept_.clear();
    for (Held& h : initializers_) h.reset();
    initializers_.clear();
  }

  void runEnded() {
    running_ = false;
    if (releasing_) close();
  }

 private:
  // Applies the options; answers the CUDA provider's options as ONNX Runtime took them (or "").
  static std::string configure(OrtSessionOptions* so, const Napi::Object& options) {
    auto number = [&](const char* key) -> int {
      Napi::Value v = options.Get(key);
      if (v.IsUndefined()) return -1;
      if (!v.IsNumber()) throw ArgumentError(std::string("options.") + key + " must be a number");
      double d = v.As<Napi::Number>().DoubleValue();
      if (!(d >= 0) || d > 4096 || d != static_cast<int>(d)) throw ArgumentError(std::string("options.") + key + " must be a whole number from 0 to 4096");
      return static_cast<int>(d);
    };
    int intra = number("intraOpThreads");
    if (intra >= 0) check(ort->SetIntraOpNumThreads(so, intra));
    int inter = number("interOpThreads");
    if (inter >= 0) check(ort->SetInterOpNumThreads(so, inter));
    Napi::Value spin = options.Get("allowSpinning");
    if (!spin.IsUndefined()) {
      if (!spin.IsBoolean()) throw ArgumentError("options.allowSpinning must be a boolean");
      check(ort->AddSessionConfigEntry(so, "session.intra_op.allow_spinning", spin.As<Napi::Boolean>().Value() ? "1" : "0"));
      check(ort->AddSessionConfigEntry(so, "session.inter_op.allow_spinning", spin.As<Napi::Boolean>().Value() ? "1" : "0"));
    }
    Napi::Value level = options.Get("graphOptimizationLevel");
    if (!level.IsUndefined()) {
      std::string l = level.IsString() ? level.As<Napi::String>().Utf8Value() : "";
      GraphOptimizationLevel g;
      if (l == "disabled") g = ORT_DISABLE_ALL;
      else if (l == "basic") g = ORT_ENABLE_BASIC;
      else if (l == "extended") g = ORT_ENABLE_EXTENDED;
      else if (l == "all") g = ORT_ENABLE_ALL;
      else throw ArgumentError("options.graphOptimizationLevel must be disabled, basic, extended or all");
      check(ort->SetSessionGraphOptimizationLevel(so, g));
    }
    Napi::Value optimized = options.Get("optimizedModelFilePath");
    if (!optimized.IsUndefined()) {
      if (!optimized.IsString()) throw ArgumentError("options.optimizedModelFilePath must be a string");
      std::string p = optimized.As<Napi::String>().Utf8Value();
      check(ort->SetOptimizedModelFilePath(so, p.c_str()));
    }
    Napi::Value global = options.Get("useGlobalThreadPool");
    if (global.IsBoolean() && global.As<Napi::Boolean>().Value()) {
      if (!globalPools) throw ArgumentError("options.useGlobalThreadPool: init() made no global thread pool (give it globalIntraOpThreads)");
      check(ort->DisablePerSessionThreads(so));
    }
    Napi::Value cuda = options.Get("cuda");
    std::string provider = cuda.IsUndefined() ? "" : appendCuda(so, cuda);
    Napi::Value profile = options.Get("profilePrefix");
    if (!profile.IsUndefined()) {
      if (!profile.IsString()) throw ArgumentError("options.profilePrefix must be a string");
      std::string prefix = profile.As<Napi::String>().Utf8Value();
      check(ort->EnableProfiling(so, prefix.c_str()));
    }
    Napi::Value logLevel = options.Get("logSeverityLevel");
    if (!logLevel.IsUndefined()) {
      int n = number("logSeverityLevel");
      if (n > 4) throw ArgumentError("options.logSeverityLevel must be 0 to 4");
      check(ort->SetSessionLogSeverityLevel(so, n));
    }
    return provider;
  }

  // options.cuda = { deviceId, options: { key: value } }: the CUDA execution provider on that
  // device, with ONNX Runtime's own option names (use_tf32, cudnn_conv_algo_search, gpu_mem_limit,
  // enable_cuda_graph, ...), which ONNX Runtime checks. The CUDA libraries must be loaded first
  // (cudaLoad); the provider's own two libraries sit beside libonnxruntime.so.1.
  static std::string appendCuda(OrtSessionOptions* so, const Napi::Value& cuda) {
    if (!cuda.IsObject()) throw ArgumentError("options.cuda must be { deviceId, options }");
    if (!stowage_cuda::runtime()) throw ArgumentError("options.cuda: the CUDA libraries are not loaded in this process (cudaLoad first)");
    Napi::Object c = cuda.As<Napi::Object>();
    Napi::Value id = c.Get("deviceId");
    if (!id.IsNumber() || id.As<Napi::Number>().DoubleValue() < 0 || id.As<Napi::Number>().DoubleValue() != id.As<Napi::Number>().Int32Value()) {
      throw ArgumentError("options.cuda.deviceId must be a whole number, 0 or more");
    }
    std::vector<std::string> keys{"device_id"};
    std::vector<std::string> values{std::to_string(id.As<Napi::Number>().Int32Value())};
    Napi::Value given = c.Get("options");
    if (!given.IsUndefined()) {
      if (!given.IsObject()) throw ArgumentError("options.cuda.options must be an object of strings");
      Napi::Object o = given.As<Napi::Object>();
      Napi::Array names = o.GetPropertyNames();
      for (uint32_t i = 0; i < names.Length(); i++) {
        std::string k = names.Get(i).As<Napi::String>().Utf8Value();
        Napi::Value v = o.Get(k);
        if (!v.IsString()) throw ArgumentError("options.cuda.options." + k + " must be a string");
        if (k == "device_id") throw ArgumentError("options.cuda.options.device_id: give deviceId instead");
        keys.push_back(k);
        values.push_back(v.As<Napi::String>().Utf8Value());
      }
    }
    std::vector<const char*> k, v;
    for (size_t i = 0; i < keys.size(); i++) {
      k.push_back(keys[i].c_str());
      v.push_back(values[i].c_str());
    }
    OrtCUDAProviderOptionsV2* provider = nullptr;
    check(ort->CreateCUDAProviderOptions(&provider));
    std::unique_ptr<OrtCUDAProviderOptionsV2, void (*)(OrtCUDAProviderOptionsV2*)> guard(provider, [](OrtCUDAProviderOptionsV2* p) { ort->ReleaseCUDAProviderOptions(p); });
    check(ort->UpdateCUDAProviderOptions(provider, k.data(), v.data(), k.size()));
    check(ort->SessionOptionsAppendExecutionProvider_CUDA_V2(so, provider));
    char* taken = nullptr;
    check(ort->GetCUDAProviderOptionsAsString(provider, allocator, &taken));
    std::string out(taken);
    allocator->Free(allocator, taken);
    return out;
  }

  static std::vector<Held> initializersOf(OrtSessionOptions* so, Napi::Object options, const char* key, bool external) {
    std::vector<Held> held;
    Napi::Value given = options.Get(key);
    if (given.IsUndefined()) return held;
    if (!given.IsArray()) throw ArgumentError(std::string("options.") + key + " must be an array of tensors");
    Napi::Array list = given.As<Napi::Array>();
    std::vector<std::string> names;
    for (uint32_t i = 0; i < list.Length(); i++) {
      std::string what = std::string(key) + "[" + std::to_string(i) + "]";
      if (!list.Get(i).IsObject()) throw ArgumentError("options." + what + " must be a tensor");
      Napi::Object t = list.Get(i).As<Napi::Object>();
      names.push_back(nameOf(t, what));
      held.push_back(tensorOf(t, what + " (" + names.back() + ")"));
    }
    if (external) {
      std::vector<const char*> cNames;
      std::vector<const OrtValue*> values;
      for (size_t i = 0; i < held.size(); i++) {
        cNames.push_back(names[i].c_str());
        values.push_back(held[i].value);
      }
      if (!held.empty()) check(ort->AddExternalInitializers(so, cNames.data(), values.data(), cNames.size()));
    } else {
      for (size_t i = 0; i < held.size(); i++) check(ort->AddInitializer(so, names[i].c_str(), held[i].value));
    }
    return held;
  }

  void requireOpen() const {
    if (!session_ || releasing_) throw ArgumentError("the session has been released");
  }

  Napi::Value describe(Napi::Env e, bool inputs) {
    requireOpen();
    size_t count = 0;
    check(inputs ? ort->SessionGetInputCount(session_, &count) : ort->SessionGetOutputCount(session_, &count));
    Napi::Array out = Napi::Array::New(e, count);
    for (size_t i = 0; i < count; i++) {
      char* name = nullptr;
      check(inputs ? ort->SessionGetInputName(session_, i, allocator, &name) : ort->SessionGetOutputName(session_, i, allocator, &name));
      std::string n(name);
      allocator->Free(allocator, name);
      OrtTypeInfo* typeInfo = nullptr;
      check(inputs ? ort->SessionGetInputTypeInfo(session_, i, &typeInfo) : ort->SessionGetOutputTypeInfo(session_, i, &typeInfo));
      Napi::Object t = Napi::Object::New(e);
      t.Set("name", n);
      const OrtTensorTypeAndShapeInfo* tensor = nullptr;
      OrtStatus* s = ort->CastTypeInfoToTensorInfo(typeInfo, &tensor);
      if (!s && tensor) {
        ONNXTensorElementDataType type;
        size_t dimsCount = 0;
        s = ort->GetTensorElementType(tensor, &type);
        if (!s) s = ort->GetDimensionsCount(tensor, &dimsCount);
        std::vector<int64_t> dims(dimsCount);
        std::vector<const char*> symbols(dimsCount, nullptr);
        if (!s && dimsCount) s = ort->GetDimensions(tensor, dims.data(), dimsCount);
        if (!s && dimsCount) s = ort->GetSymbolicDimensions(tensor, symbols.data(), dimsCount);
        if (!s) {
          t.Set("isTensor", true);
          t.Set("type", static_cast<int>(type));
          Napi::Array shape = Napi::Array::New(e, dimsCount);
          for (size_t d = 0; d < dimsCount; d++) {
            // A symbolic dim reads as its name; an unnamed free one as -1.
            if (dims[d] < 0 && symbols[d] && symbols[d][0]) shape.Set(d, Napi::String::New(e, symbols[d]));
            else shape.Set(d, Napi::Number::New(e, static_cast<double>(dims[d])));
          }
          t.Set("dims", shape);
        }
      } else {
        t.Set("isTensor", false);
      }
      ort->ReleaseTypeInfo(typeInfo);
      check(s);
      out.Set(i, t);
    }
    return out;
  }

  Napi::Value Inputs(const Napi::CallbackInfo& info) {
    try {
      return describe(info.Env(), true);
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
  }

  Napi::Value Outputs(const Napi::CallbackInfo& info) {
    try {
      return describe(info.Env(), false);
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
  }

  // bindInput(tensor): bound for every later run until unbindInputs() (a weightless session's weights).
  Napi::Value BindInput(const Napi::CallbackInfo& info) {
    try {
      requireOpen();
      if (running_) throw ArgumentError("bindInput while a run is in flight");
      if (info.Length() < 1 || !info[0].IsObject()) throw ArgumentError("bindInput(tensor): tensor must be an object");
      Napi::Object t = info[0].As<Napi::Object>();
      std::string name = nameOf(t, "bound input");
      requireName(inputNames_, name, "input");
      Held held = tensorOf(t, "bound input " + name);
      try {
        check(ort->BindInput(binding_, name.c_str(), held.value));
      } catch (...) {
        rebuildBinding();
        throw;
      }
      kept_[name] = std::move(held);
      return info.Env().Undefined();
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
  }

  Napi::Value UnbindInputs(const Napi::CallbackInfo& info) {
    try {
      requireOpen();
      if (running_) throw ArgumentError("unbindInputs while a run is in flight");
      ort->ClearBoundInputs(binding_);
      for (auto& [name, held] : kept_) held.reset();
      kept_.clear();
      return info.Env().Undefined();
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
  }

  Napi::Value Run(const Napi::CallbackInfo& info);
  Napi::Value RunSync(const Napi::CallbackInfo& info);
  // Check and bind a run's tensors (run and runSync alike); the state holds what they view.
  std::unique_ptr<RunState> prepare(const Napi::CallbackInfo& info);

  Napi::Value Terminate(const Napi::CallbackInfo& info);

  Napi::Value ProviderOptions(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), providerOptions_);
  }

  Napi::Value Release(const Napi::CallbackInfo& info) {
    if (running_) releasing_ = true;
    else close();
    return info.Env().Undefined();
  }

 public:
  RunWorker* current_ = nullptr;
};

// Every bound output, in the order they were asked for: a given buffer as it was given (ONNX
// Runtime wrote into it), an allocated one as an ArrayBuffer over ONNX Runtime's memory.
Napi::Array collectOutputs(Napi::Env e, Session* session, RunState* state) {
  OrtValue** values = nullptr;
  size_t count = 0;
  check(ort->GetBoundOutputValues(session->binding_, allocator, &values, &count));
  std::vector<OrtValue*> owned(values, values + count);
  allocator->Free(allocator, values);
  struct Release {
    std::vector<OrtValue*>& list;
    ~Release() {
      for (OrtValue* v : list) if (v) ort->ReleaseValue(v);
    }
  } release{owned};
  if (count != state->outputs.size()) throw OrtFailure(ORT_FAIL, "ONNX Runtime returned " + std::to_string(count) + " outputs for " + std::to_string(state->outputs.size()) + " bound");
  Napi::Array out = Napi::Array::New(e, count);
  for (size_t i = 0; i < count; i++) {
    auto& [name, given] = state->outputs[i];
    int type = 0;
    std::vector<int64_t> dims;
    shapeOf(owned[i], type, dims);
    Napi::Object t = Napi::Object::New(e);
    t.Set("name", name);
    t.Set("type", type);
    Napi::Array shape = Napi::Array::New(e, dims.size());
    for (size_t d = 0; d < dims.size(); d++) shape.Set(d, Napi::Number::New(e, static_cast<double>(dims[d])));
    t.Set("dims", shape);
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
      std::vector<uint8_t> joined = joinElements(owned[i]);
      Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(e, joined.size());
      if (!joined.empty()) std::memcpy(ab.Data(), joined.data(), joined.size());
      t.Set("data", Napi::Uint8Array::New(e, joined.size(), ab, 0));
    } else if (!given.keep.IsEmpty()) {
      t.Set("data", given.keep.Value());
    } else {
      void* data = nullptr;
      check(ort->GetTensorMutableData(owned[i], &data));
      size_t bytes = elementsOf(dims, name) * elementBytes(type);
      // Handed over without a copy: the ArrayBuffer views ONNX Runtime's memory and releases the
      // OrtValue (one reference of it) when collected.
      OrtValue* ref = owned[i];
      owned[i] = nullptr;
      Napi::ArrayBuffer ab = bytes
        ? Napi::ArrayBuffer::New(e, data, bytes, [](Napi::Env, void*, OrtValue* v) { ort->ReleaseValue(v); }, ref)
        : Napi::ArrayBuffer::New(e, 0);
      if (!bytes) ort->ReleaseValue(ref);
      t.Set("data", Napi::Uint8Array::New(e, bytes, ab, 0));
    }
    out.Set(i, t);
  }
  return out;
}


class RunWorker : public Napi::AsyncWorker {
 public:
  RunWorker(Napi::Env e, Session* session, std::unique_ptr<RunState> state)
      : Napi::AsyncWorker(e, "stowage.ort.run"), deferred_(Napi::Promise::Deferred::New(e)), session_(session), state_(std::move(state)) {
    self_ = Napi::Persistent(session->Value());
  }

  Napi::Promise Promise() { return deferred_.Promise(); }

  void terminate() {
    if (!state_ || !state_->options) return;
    OrtStatus* s = ort->RunOptionsSetTerminate(state_->options);
    if (s) ort->ReleaseStatus(s);
  }

 protected:
  void Execute() override {
    try {
      check(ort->RunWithBinding(session_->session_, state_->options, session_->binding_));
    } catch (const OrtFailure& err) {
      failure_ = std::make_unique<OrtFailure>(err);
    } catch (const std::exception& err) {
      failure_ = std::make_unique<OrtFailure>(ORT_FAIL, err.what());
    }
  }

  void OnOK() override {
    Napi::Env e = Env();
    Napi::HandleScope scope(e);
    if (failure_) {
      finish();
      deferred_.Reject(toJs(e, *failure_).Value());
      return;
    }
    try {
      Napi::Array results = collectOutputs(e, session_, state_.get());
      finish();
      deferred_.Resolve(results);
    } catch (const std::exception& err) {
      finish();
      deferred_.Reject(toJs(e, err).Value());
    }
  }

  void OnError(const Napi::Error& err) override {
    finish();
    deferred_.Reject(err.Value());
  }

 private:
  void finish() {
    if (session_->binding_) {
      ort->ClearBoundOutputs(session_->binding_);
    }
    session_->current_ = nullptr;
    session_->runEnded();
    state_.reset();
    self_.Reset();
  }

  Napi::Promise::Deferred deferred_;
  Session* session_;
  std::unique_ptr<RunState> state_;
  std::unique_ptr<OrtFailure> failure_;
  Napi::ObjectReference self_;
};

// Check a run's arguments and bind its tensors: this run's inputs over the kept ones, its
// outputs afresh. A refusal leaves the binding as it was (made anew with the kept inputs).
std::unique_ptr<RunState> Session::prepare(const Napi::CallbackInfo& info) {
  bool binding = false;  // whether this call has started to change the binding (undone if it fails)
  try {
    requireOpen();
    if (running_) throw ArgumentError("a run is already in flight on this session: runs of one session go one at a time");
    if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsArray()) throw ArgumentError("run(inputs, outputs): both must be arrays");
    auto state = std::make_unique<RunState>();
    // run(inputs, outputs, { graphId }): the CUDA graph this run captures or replays (ONNX
    // Runtime's gpu_graph_id run option; -1 runs without one), for sessions opened with the CUDA
    // provider's enable_cuda_graph.
    if (info.Length() > 2 && !info[2].IsUndefined()) {
      if (!info[2].IsObject()) throw ArgumentError("run(inputs, outputs, options): options must be an object");
      Napi::Value graph = info[2].As<Napi::Object>().Get("graphId");
      if (!graph.IsUndefined()) {
        if (!graph.IsNumber()) throw ArgumentError("run options: graphId must be an integer");
        double id = graph.As<Napi::Number>().DoubleValue();
        if (id != static_cast<double>(static_cast<int64_t>(id)) || id < -1 || id > 2147483647) throw ArgumentError("run options: graphId must be an integer from -1 to 2^31-1");
        check(ort->CreateRunOptions(&state->options));
        check(ort->AddRunConfigEntry(state->options, "gpu_graph_id", std::to_string(static_cast<int64_t>(id)).c_str()));
      }
    }
    Napi::Array inputs = info[0].As<Napi::Array>();
    Napi::Array outputs = info[1].As<Napi::Array>();
    if (outputs.Length() == 0) throw ArgumentError("run: name at least one output");
    std::vector<std::string> inputNames;
    for (uint32_t i = 0; i < inputs.Length(); i++) {
      if (!inputs.Get(i).IsObject()) throw ArgumentError("input " + std::to_string(i) + " must be a tensor");
      Napi::Object t = inputs.Get(i).As<Napi::Object>();
      inputNames.push_back(nameOf(t, "input " + std::to_string(i)));
      state->inputs.push_back(tensorOf(t, "input " + inputNames.back()));
    }
    for (uint32_t i = 0; i < outputs.Length(); i++) {
      Napi::Value o = outputs.Get(i);
      if (o.IsString()) {
        state->outputs.emplace_back(o.As<Napi::String>().Utf8Value(), Held());
      } else if (o.IsObject()) {
        Napi::Object t = o.As<Napi::Object>();
        std::string name = nameOf(t, "output " + std::to_string(i));
        Held held = tensorOf(t, "output " + name);
        if (held.keep.IsEmpty()) throw ArgumentError("output " + name + ": a BYTES output cannot be given a buffer; name it instead");
        state->outputs.emplace_back(name, std::move(held));
      } else {
        throw ArgumentError("output " + std::to_string(i) + " must be a name or a tensor with a buffer");
      }
    }
    for (size_t i = 0; i < inputNames.size(); i++) {
      requireName(inputNames_, inputNames[i], "input");
      for (size_t j = 0; j < i; j++) if (inputNames[j] == inputNames[i]) throw ArgumentError("input " + inputNames[i] + " is given twice");
      if (kept_.count(inputNames[i])) throw ArgumentError("input " + inputNames[i] + " is bound with bindInput: unbind it first");
    }
    for (const std::string& needed : inputNames_) {
      bool given = kept_.count(needed) > 0;
      for (const std::string& n : inputNames) given = given || n == needed;
      if (!given) throw ArgumentError("input " + needed + " is missing: every input the graph takes must be given (or bound with bindInput)");
    }
    for (size_t i = 0; i < state->outputs.size(); i++) {
      requireName(outputNames_, state->outputs[i].first, "output");
      for (size_t j = 0; j < i; j++) if (state->outputs[j].first == state->outputs[i].first) throw ArgumentError("output " + state->outputs[i].first + " is asked for twice");
    }
    binding = true;
    ort->ClearBoundOutputs(binding_);
    for (size_t i = 0; i < state->inputs.size(); i++) check(ort->BindInput(binding_, inputNames[i].c_str(), state->inputs[i].value));
    for (auto& [name, held] : state->outputs) {
      if (held.value) check(ort->BindOutput(binding_, name.c_str(), held.value));
      else check(ort->BindOutputToDevice(binding_, name.c_str(), cpu));
    }
    return state;
  } catch (...) {
    if (binding && binding_) rebuildBinding();
    throw;
  }
}

// run(inputs: Tensor[], outputs: (string | Tensor)[]): Promise<OutputTensor[]>, on a libuv thread.
Napi::Value Session::Run(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  try {
    std::unique_ptr<RunState> state = prepare(info);
    if (!state->options) check(ort->CreateRunOptions(&state->options));  // terminate() sets its flag
    auto* worker = new RunWorker(e, this, std::move(state));
    Napi::Promise promise = worker->Promise();
    running_ = true;
    current_ = worker;
    worker->Queue();
    return promise;
  } catch (const std::exception& err) {
    throw toJs(e, err);
  }
}

// runSync(inputs, outputs): OutputTensor[], on the calling thread: for runs shorter than the
// hop to a libuv thread and back (tens of microseconds), which would cost more than they save.
Napi::Value Session::RunSync(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  try {
    std::unique_ptr<RunState> state = prepare(info);
    struct Clear {
      OrtIoBinding* binding;
      ~Clear() {
        if (binding) ort->ClearBoundOutputs(binding);
      }
    } clear{binding_};
    check(ort->RunWithBinding(session_, state->options, binding_));
    return collectOutputs(e, this, state.get());
  } catch (const std::exception& err) {
    throw toJs(e, err);
  }
}

// terminate(): the run in flight stops at its next check and rejects; nothing happens without one.
Napi::Value Session::Terminate(const Napi::CallbackInfo& info) {
  if (current_) current_->terminate();
  return Napi::Boolean::New(info.Env(), current_ != nullptr);
}

// init(libraryPath, { globalIntraOpThreads?, globalInterOpThreads?, globalAllowSpinning? }): version
Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  try {
    if (info.Length() < 1 || !info[0].IsString()) throw ArgumentError("init(libraryPath): the path of libonnxruntime.so.1");
    std::string path = info[0].As<Napi::String>().Utf8Value();
    std::lock_guard<std::mutex> lock(initMutex);
    if (ort) {
      if (path != loadedFrom) throw ArgumentError("ONNX Runtime is already loaded from " + loadedFrom + ", not " + path);
      bool wantsGlobal = info.Length() > 1 && info[1].IsObject() && info[1].As<Napi::Object>().Get("globalIntraOpThreads").IsNumber();
      if (wantsGlobal && !globalPools) throw ArgumentError("ONNX Runtime's environment was made without a process-wide thread pool; it is made once per process");
      return Napi::String::New(e, version);
    }
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!library) throw ArgumentError(std::string("cannot load ") + path + ": " + dlerror());
    using GetApiBase = const OrtApiBase* (*)();
    auto getApiBase = reinterpret_cast<GetApiBase>(dlsym(library, "OrtGetApiBase"));
    if (!getApiBase) throw ArgumentError(path + " has no OrtGetApiBase: it is not ONNX Runtime");
    const OrtApiBase* base = getApiBase();
    const OrtApi* api = base->GetApi(ORT_API_VERSION);
    if (!api) throw ArgumentError(std::string("ONNX Runtime ") + base->GetVersionString() + " does not serve C API version " + std::to_string(ORT_API_VERSION));
    ort = api;
    version = base->GetVersionString();
    try {
      OrtThreadingOptions* threading = nullptr;
      Napi::Object options = info.Length() > 1 && info[1].IsObject() ? info[1].As<Napi::Object>() : Napi::Object::New(e);
      Napi::Value intra = options.Get("globalIntraOpThreads");
      if (intra.IsNumber()) {
        check(ort->CreateThreadingOptions(&threading));
        check(ort->SetGlobalIntraOpNumThreads(threading, intra.As<Napi::Number>().Int32Value()));
        Napi::Value inter = options.Get("globalInterOpThreads");
        check(ort->SetGlobalInterOpNumThreads(threading, inter.IsNumber() ? inter.As<Napi::Number>().Int32Value() : 1));
        Napi::Value spin = options.Get("globalAllowSpinning");
        check(ort->SetGlobalSpinControl(threading, spin.IsBoolean() && spin.As<Napi::Boolean>().Value() ? 1 : 0));
        OrtStatus* s = ort->CreateEnvWithGlobalThreadPools(ORT_LOGGING_LEVEL_WARNING, "stowage", threading, &env);
        ort->ReleaseThreadingOptions(threading);
        check(s);
        globalPools = true;
      } else {
        check(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "stowage", &env));
      }
      check(ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &cpu));
      check(ort->GetAllocatorWithDefaultOptions(&allocator));
    } catch (...) {
      ort = nullptr;
      throw;
    }
    loadedFrom = path;
    return Napi::String::New(e, version);
  } catch (const std::exception& err) {
    throw toJs(e, err);
  }
}

// ---------------------------------------------------------------------------------------------
// Device memory

const napi_type_tag kDeviceMemoryTag = {0x73746f7761676500ULL, 0x6465766963656d31ULL};

// new DeviceMemory(bytes, device): `bytes` of memory on `device` ('cpu'; 'cuda:N' once the CUDA
// provider is registered), filled and read by copyFromHost / copyToHost, freed by release()
// once no tensor of a session still views it.
class DeviceMemory : public Napi::ObjectWrap<DeviceMemory> {
 public:
  static Napi::Function Define(Napi::Env e) {
    return DefineClass(e, "DeviceMemory", {
      InstanceAccessor("bytes", &DeviceMemory::Bytes, nullptr),
      InstanceAccessor("device", &DeviceMemory::Device, nullptr),
      InstanceMethod("copyFromHost", &DeviceMemory::CopyFromHost),
      InstanceMethod("copyToHost", &DeviceMemory::CopyToHost),
      InstanceMethod("moveWithin", &DeviceMemory::MoveWithin),
      InstanceMethod("synchronize", &DeviceMemory::Synchronize),
      InstanceMethod("release", &DeviceMemory::Release),
    });
  }

  std::shared_ptr<DeviceBlock> block;

  explicit DeviceMemory(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceMemory>(info) {
    Napi::Env e = info.Env();
    try {
      requireInit();
      double bytes = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
      if (!wholeBytes(bytes)) throw ArgumentError("new DeviceMemory(bytes, device): bytes must be a whole number, 0 or more");
      std::string device = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
      auto b = std::make_shared<DeviceBlock>();
      b->device = device;
      b->bytes = static_cast<size_t>(bytes);
      if (device == "cpu") {
        b->allocator = allocator;
        b->info = cpu;
      } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9 && device.find_first_not_of("0123456789", 5) == std::string::npos) {
        const stowage_cuda::Runtime* rt = stowage_cuda::runtime();
        if (!rt) throw ArgumentError("device " + device + ": no allocator for it in this process (the CUDA libraries are not loaded: backend cuda loads them)");
        b->cudaOrdinal = std::stoi(device.substr(5));
        b->info = cudaMemoryInfo(b->cudaOrdinal);
      } else {
        throw ArgumentError("new DeviceMemory(bytes, device): device must be 'cpu' or 'cuda:N', not '" + device + "'");
      }
      // At least a byte, so that an empty block still has an address of its own.
      if (b->allocator) {
        b->data = b->allocator->Alloc(b->allocator, b->bytes ? b->bytes : 1);
        if (!b->data) throw ArgumentError("device " + device + ": cannot allocate " + std::to_string(b->bytes) + " bytes");
      } else {
        const stowage_cuda::Runtime* rt = stowage_cuda::runtime();
        void* p = nullptr;
        try {
          stowage_cuda::check(rt->setDevice(b->cudaOrdinal), "device " + device);
          stowage_cuda::check(rt->malloc(&p, b->bytes ? b->bytes : 1), "device " + device + ": cudaMalloc of " + std::to_string(b->bytes) + " bytes");
        } catch (const std::runtime_error& err) {
          throw OrtFailure(ORT_FAIL, err.what());
        }
        b->data = p;
      }
      block = std::move(b);
      Value().TypeTag(&kDeviceMemoryTag);
    } catch (const std::exception& err) {
      throw toJs(e, err);
    }
  }

 private:
  Napi::Value Bytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), block ? static_cast<double>(block->bytes) : 0);
  }
  Napi::Value Device(const Napi::CallbackInfo& info) {
    return block ? Napi::String::New(info.Env(), block->device) : info.Env().Null();
  }

  // Host bytes [src] -> device [offset, offset + src.length), or device -> host [dst].
  void copy(const Napi::CallbackInfo& info, bool toDevice) {
    const char* call = toDevice ? "copyFromHost(src, offset)" : "copyToHost(dst, offset)";
    if (!block) throw ArgumentError(std::string(call) + ": the device memory has been released");
    ::Bytes host = bytesOf(info.Length() > 0 ? info[0] : info.Env().Undefined(), call);
    size_t at = offsetOf(info.Length() > 1 ? info[1] : info.Env().Undefined(), call);
    if (at > block->bytes || host.length > block->bytes - at) {
      throw ArgumentError(std::string(call) + ": " + std::to_string(host.length) + " bytes at offset " + std::to_string(at) + " do not fit in the device memory's " + std::to_string(block->bytes));
    }
    if (host.length == 0) return;
    uint8_t* device = static_cast<uint8_t*>(block->data) + at;
    if (block->info == cpu) {
      // The CPU device's memory is host memory: ONNX Runtime registers no data transfer for it
      // (CopyTensors answers NOT_IMPLEMENTED), and a memcpy is what one would do.
      std::memmove(toDevice ? device : host.data, toDevice ? host.data : device, host.length);
      return;
    }
    // A GPU: a copy on the legacy default stream, at the bus's speed from pinned memory (pinHost).
    // ONNX Runtime's kernels run on a stream of their own that does not wait for this one, so a
    // copy to the device is waited for before answering (a run started next reads the bytes
    // copied), unless `wait` is false: then the caller calls synchronize() after its last copy
    // (a model's weights: one wait for all its tensors), and keeps `src` alive and unchanged until.
    bool wait = info.Length() < 3 || !info[2].IsBoolean() || info[2].As<Napi::Boolean>().Value();
    const stowage_cuda::Runtime* rt = stowage_cuda::runtime();
    try {
      stowage_cuda::check(rt->setDevice(block->cudaOrdinal), block->device);
      if (toDevice && !wait) {
        stowage_cuda::check(rt->memcpyAsync(device, host.data, host.length, stowage_cuda::kHostToDevice, nullptr), std::string(call) + " on " + block->device);
        return;
      }
      stowage_cuda::check(rt->memcpy(toDevice ? device : host.data, toDevice ? host.data : device, host.length, toDevice ? stowage_cuda::kHostToDevice : stowage_cuda::kDeviceToHost), std::string(call) + " on " + block->device);
      stowage_cuda::check(rt->streamSynchronize(nullptr), std::string(call) + " on " + block->device);
    } catch (const std::runtime_error& err) {
      throw OrtFailure(ORT_FAIL, err.what());
    }
  }

  // synchronize(): every copy issued without waiting (copyFromHost(src, offset, false)) has landed.
  Napi::Value Synchronize(const Napi::CallbackInfo& info) {
    try {
      if (!block) throw ArgumentError("synchronize(): the device memory has been released");
      if (block->cudaOrdinal >= 0) {
        const stowage_cuda::Runtime* rt = stowage_cuda::runtime();
        try {
          stowage_cuda::check(rt->setDevice(block->cudaOrdinal), block->device);
          stowage_cuda::check(rt->streamSynchronize(nullptr), "synchronize() on " + block->device);
        } catch (const std::runtime_error& err) {
          throw OrtFailure(ORT_FAIL, err.what());
        }
      }
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
    return info.Env().Undefined();
  }

  // moveWithin(to, from, length): bytes [from, from + length) to [to, to + length) in this memory
  // (compaction of the weight arena), overlapping ranges allowed.
  void moveWithin(const Napi::CallbackInfo& info) {
    const char* call = "moveWithin(to, from, length)";
    if (!block) throw ArgumentError(std::string(call) + ": the device memory has been released");
    Napi::Value undef = info.Env().Undefined();
    size_t to = offsetOf(info.Length() > 0 ? info[0] : undef, call);
    size_t from = offsetOf(info.Length() > 1 ? info[1] : undef, call);
    size_t length = offsetOf(info.Length() > 2 ? info[2] : undef, call);
    if (to > block->bytes || from > block->bytes || length > block->bytes - to || length > block->bytes - from) {
      throw ArgumentError(std::string(call) + ": " + std::to_string(length) + " bytes from " + std::to_string(from) + " to " + std::to_string(to) + " do not fit in the device memory's " + std::to_string(block->bytes));
    }
    if (length == 0 || to == from) return;
    uint8_t* base = static_cast<uint8_t*>(block->data);
    if (block->info == cpu) {
      std::memmove(base + to, base + from, length);
      return;
    }
    // cudaMemcpy leaves overlapping ranges undefined: copy in pieces no longer than the distance
    // moved, in the order that never overwrites bytes still to be read.
    const stowage_cuda::Runtime* rt = stowage_cuda::runtime();
    size_t distance = to > from ? to - from : from - to;
    try {
      stowage_cuda::check(rt->setDevice(block->cudaOrdinal), block->device);
      for (size_t done = 0; done < length;) {
        size_t piece = std::min(distance, length - done);
        size_t at = to < from ? done : length - done - piece;
        stowage_cuda::check(rt->memcpy(base + to + at, base + from + at, piece, stowage_cuda::kDeviceToDevice), std::string(call) + " on " + block->device);
        done += piece;
      }
      stowage_cuda::check(rt->streamSynchronize(nullptr), std::string(call) + " on " + block->device);
    } catch (const std::runtime_error& err) {
      throw OrtFailure(ORT_FAIL, err.what());
    }
  }

  Napi::Value MoveWithin(const Napi::CallbackInfo& info) {
    try {
      moveWithin(info);
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
    return info.Env().Undefined();
  }

  Napi::Value CopyFromHost(const Napi::CallbackInfo& info) {
    try {
      copy(info, true);
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
    return info.Env().Undefined();
  }
  Napi::Value CopyToHost(const Napi::CallbackInfo& info) {
    try {
      copy(info, false);
    } catch (const std::exception& err) {
      throw toJs(info.Env(), err);
    }
    return info.Env().Undefined();
  }

  // Free now, unless a session's tensor still views it (an input bound, a run in flight).
  Napi::Value Release(const Napi::CallbackInfo& info) {
    if (block && block.use_count() > 1) {
      throw toJs(info.Env(), ArgumentError("release(): the device memory is still viewed by " + std::to_string(block.use_count() - 1) + " tensor(s) of a session (unbind or wait for the run)"));
    }
    block.reset();
    return info.Env().Undefined();
  }
};

std::shared_ptr<DeviceBlock>* blockOf(const Napi::Object& o) {
  if (!o.CheckTypeTag(&kDeviceMemoryTag)) return nullptr;
  return &DeviceMemory::Unwrap(o)->block;
}

Napi::Object Module(Napi::Env e, Napi::Object exports) {
  exports.Set("DeviceMemory", DeviceMemory::Define(e));
  stowage_cuda::define(e, exports);
  exports.Set("init", Napi::Function::New(e, Init));
  exports.Set("apiVersion", Napi::Number::New(e, ORT_API_VERSION));
  exports.Set("Session", Session::Define(e));
  return exports;
}

}  // namespace

NODE_API_MODULE(stowage_ort, Module)

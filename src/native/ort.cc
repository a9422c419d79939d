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
//   - errors as JavaScript errors carrying their origin and its number (failure.h: ONNX Runtime's
//     OrtErrorCode, CUDA's error number, out of memory); bad arguments are refused before anything
//     reaches ONNX Runtime.
//
// Every ONNX Runtime handle the binding makes is owned (Owned<T>, Held, RunState) from the call
// that makes it, so no path leaks one; CUDA is cuda.cc's (device memory and its copies included).
//
// Ownership: a tensor handed to `run` or `bindInput` must not be detached (transferred) while a
// run may read or write it: the session keeps a reference to every buffer it uses, which keeps it
// from being collected, but cannot stop a transfer. A session released while a run is in flight
// is released when the run ends.
#include <dlfcn.h>
#include <malloc.h>
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "buffers.h"
#include "cuda.h"
#include "failure.h"
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
// The CPU arena registered with the environment (registerCpuArena), which sessions opened with
// useEnvAllocators take their activations from; null until registered.
OrtMemoryInfo* cpuArena = nullptr;
// The same arena as a session opened with useEnvAllocators hands it out (CreateAllocator), for its
// counts: ONNX Runtime gives an arena registered with CreateAndRegisterAllocator back no other way.
OrtAllocator* cpuArenaAllocator = nullptr;
std::mutex cpuArenaMutex;

using stowage::ArgumentError;
using stowage::Bytes;
using stowage::bytesOf;
using stowage::entry;

// ONNX Runtime's handles, each released by its own Release function when its owner goes.
struct OrtRelease {
  void operator()(OrtStatus* p) const { ort->ReleaseStatus(p); }
  void operator()(OrtEnv* p) const { ort->ReleaseEnv(p); }
  void operator()(OrtThreadingOptions* p) const { ort->ReleaseThreadingOptions(p); }
  void operator()(OrtSessionOptions* p) const { ort->ReleaseSessionOptions(p); }
  void operator()(OrtTensorTypeAndShapeInfo* p) const { ort->ReleaseTensorTypeAndShapeInfo(p); }
  void operator()(OrtTypeInfo* p) const { ort->ReleaseTypeInfo(p); }
  void operator()(OrtCUDAProviderOptionsV2* p) const { ort->ReleaseCUDAProviderOptions(p); }
  void operator()(OrtRunOptions* p) const { ort->ReleaseRunOptions(p); }
  void operator()(OrtValue* p) const { ort->ReleaseValue(p); }
  void operator()(OrtMemoryInfo* p) const { ort->ReleaseMemoryInfo(p); }
  void operator()(OrtSession* p) const { ort->ReleaseSession(p); }
  void operator()(OrtIoBinding* p) const { ort->ReleaseIoBinding(p); }
  void operator()(OrtArenaCfg* p) const { ort->ReleaseArenaCfg(p); }
  void operator()(OrtKeyValuePairs* p) const { ort->ReleaseKeyValuePairs(p); }
  // Strings and arrays ONNX Runtime's default allocator made for us.
  void operator()(char* p) const { allocator->Free(allocator, p); }
  void operator()(OrtValue** p) const { allocator->Free(allocator, p); }
};
template <typename T>
using Owned = std::unique_ptr<T, OrtRelease>;

// A handle ONNX Runtime makes through an out-parameter, owned from the moment it exists:
// `Owned<OrtTypeInfo> info = made<OrtTypeInfo>([&](OrtTypeInfo** out) { return ort->...(..., out); });`
template <typename T, typename Make>
Owned<T> made(Make&& make);

void check(OrtStatus* status) {
  if (!status) return;
  Owned<OrtStatus> owned(status);
  throw stowage::OrtFailure(ort->GetErrorCode(status), ort->GetErrorMessage(status));
}

template <typename T, typename Make>
Owned<T> made(Make&& make) {
  T* out = nullptr;
  OrtStatus* status = make(&out);
  Owned<T> owned(out);
  check(status);
  return owned;
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
// the CPU it comes from ONNX Runtime's allocator; on a GPU from cuda.cc's deviceAlloc (ONNX
// Runtime's CUDA allocator belongs to a session, and this memory outlives sessions: the weight
// cache binds it to every session of the models it holds). Every tensor over it holds a
// reference, so it is freed only once nothing can read or write it.
struct DeviceBlock {
  OrtAllocator* allocator = nullptr;  // the CPU's
  int cudaOrdinal = -1;               // or a GPU's
  const OrtMemoryInfo* info = nullptr;
  std::string device;
  void* data = nullptr;
  size_t bytes = 0;
  bool ipc = false;  // another process's allocation, opened from its CUDA IPC handle: closed, not freed
  // Of an opened allocation, what the driver says: the bytes from this address to its end, the GPU
  // it is on (-1: unknown), and why either could not be told ("" when both were).
  size_t allocationBytes = 0;
  int allocationGpu = -1;
  std::string unmeasured;
  ~DeviceBlock() {
    if (!data) return;
    if (allocator && ort) allocator->Free(allocator, data);
    else if (ipc) stowage_cuda::ipcClose(cudaOrdinal, data);
    else if (cudaOrdinal >= 0) stowage_cuda::deviceFree(cudaOrdinal, data);
  }
};

// ONNX Runtime's description of memory on CUDA device `ordinal`, made once per device.
const OrtMemoryInfo* cudaMemoryInfo(int ordinal) {
  static std::mutex mutex;
  static std::unordered_map<int, OrtMemoryInfo*> infos;
  std::lock_guard<std::mutex> lock(mutex);
  auto at = infos.find(ordinal);
  if (at != infos.end()) return at->second;
  // Kept for the process's life: every tensor on that device points at it.
  OrtMemoryInfo* info = made<OrtMemoryInfo>([&](OrtMemoryInfo** out) { return ort->CreateMemoryInfo("Cuda", OrtDeviceAllocator, ordinal, OrtMemTypeDefault, out); }).release();
  infos[ordinal] = info;
  return info;
}

// An OrtValue and what keeps the memory it views alive: the JavaScript object (host memory) or
// the device block (none for ONNX Runtime's own).
struct Held {
  OrtValue* value = nullptr;
  Napi::ObjectReference keep;
  std::shared_ptr<DeviceBlock> block;
  // Its shape as given: a run's shape key reads it here rather than asking ONNX Runtime per run.
  std::vector<int64_t> dims;
  Held() = default;
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  Held(Held&& o) noexcept : value(o.value), keep(std::move(o.keep)), block(std::move(o.block)), dims(std::move(o.dims)) { o.value = nullptr; }
  Held& operator=(Held&& o) noexcept {
    if (this != &o) {
      reset();
      value = o.value;
      keep = std::move(o.keep);
      block = std::move(o.block);
      dims = std::move(o.dims);
      o.value = nullptr;
    }
    return *this;
  }
  void reset() {
    if (value) ort->ReleaseValue(value);
    value = nullptr;
    if (!keep.IsEmpty()) keep.Reset();
    block.reset();
    dims.clear();
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
  held.dims = dims;
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
      // copy: a BYTES element into ONNX Runtime's own string (it holds strings, not our bytes)
      if (!elements[i].empty()) std::memcpy(into, elements[i].data(), elements[i].size());
    }
    held.dims = std::move(dims);
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
  held.dims = std::move(dims);
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
  Owned<OrtTensorTypeAndShapeInfo> info = made<OrtTensorTypeAndShapeInfo>([&](OrtTensorTypeAndShapeInfo** out) { return ort->GetTensorTypeAndShape(value, out); });
  ONNXTensorElementDataType t;
  size_t n = 0;
  check(ort->GetTensorElementType(info.get(), &t));
  check(ort->GetDimensionsCount(info.get(), &n));
  dims.assign(n, 0);
  if (n) check(ort->GetDimensions(info.get(), dims.data(), n));
  type = static_cast<int>(t);
}

// A string tensor's elements in KServe's BYTES layout, in a new ArrayBuffer: a conversion, since
// ONNX Runtime holds them as its own strings (their lengths first, then each written in place).
Napi::ArrayBuffer joinElements(Napi::Env e, const OrtValue* value) {
  size_t count = 0;
  Owned<OrtTensorTypeAndShapeInfo> info = made<OrtTensorTypeAndShapeInfo>([&](OrtTensorTypeAndShapeInfo** out) { return ort->GetTensorTypeAndShape(value, out); });
  check(ort->GetTensorShapeElementCount(info.get(), &count));
  std::vector<size_t> lengths(count);
  size_t total = 0;
  for (size_t i = 0; i < count; i++) {
    check(ort->GetStringTensorElementLength(value, i, &lengths[i]));
    if (lengths[i] > UINT32_MAX) throw stowage::Failure(stowage::Origin::Binding, 0, "a BYTES element of " + std::to_string(lengths[i]) + " bytes does not fit KServe's 4-byte length");
    total += 4 + lengths[i];
  }
  Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(e, total);
  uint8_t* out = static_cast<uint8_t*>(ab.Data());
  for (size_t i = 0, at = 0; i < count; i++) {
    size_t length = lengths[i];
    out[at] = length & 0xff;
    out[at + 1] = (length >> 8) & 0xff;
    out[at + 2] = (length >> 16) & 0xff;
    out[at + 3] = (length >> 24) & 0xff;
    // copy: a string ONNX Runtime holds into KServe's BYTES layout (a conversion; no copy follows)
    if (length) check(ort->GetStringTensorElement(value, length, i, out + at + 4));
    at += 4 + length;
  }
  return ab;
}

// ---------------------------------------------------------------------------------------------
// Sessions

class Session;

// What a run holds until it ends: the values bound for it and the objects whose memory they view.
struct RunState {
  std::vector<Held> inputs;
  std::vector<std::pair<std::string, Held>> outputs;  // given buffers (value set) or to be allocated (value null)
  Owned<OrtRunOptions> options;
  // The CUDA graph it captures or replays (-1: none).
  int64_t graphId = -1;
  // Its inputs' names and shapes (the weights bound in its binding have theirs for good), and
  // whether the session has not yet run at them: a first run at a shape (warm-up's, or a batch size
  // a client brings later) is when cuDNN's exhaustive search times its algorithms, freeing its
  // workspace (cudaFree), which would invalidate another actor's capture on the GPU.
  std::string shape;
  bool newShape = false;
};

// A graph's first runs with the CUDA provider's enable_cuda_graph may capture it (ONNX Runtime
// runs it plainly first, for its allocations, then captures): that many runs of each graph id are
// serialised per GPU (captureLock), the rest run freely.
constexpr int kRunsUntilCaptured = 3;

class RunWorker;
class Binding;

// Inputs bound for every later run (a weightless session's weights) and the IoBinding they are
// bound in: the session's own (bindInput and run on the session), or one of several a session
// shared by models of one graph keeps, one per model (createBinding; ONNX Runtime allows many
// IoBindings per session). A run binds its own inputs and outputs in the binding it runs with.
struct Bound {
  Owned<OrtIoBinding> binding;
  // By name: kept until unbound, or until the session (or this binding) is released.
  std::unordered_map<std::string, Held> kept;
  void clear() {
    binding.reset();
    for (auto& [name, held] : kept) held.reset();
    kept.clear();
  }
};

const napi_type_tag kSessionTag = {0x73746f7761676500ULL, 0x73657373696f6e31ULL};

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
      InstanceMethod("shapesRun", &Session::ShapesRun),
    });
  }

  // new Session(model: string | Uint8Array, options)
  explicit Session(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Session>(info) {
    info.This().As<Napi::Object>().TypeTag(&kSessionTag);
    entry(info.Env(), [&] {
      try {
        open(info);
      } catch (...) {
        close();
        throw;
      }
    });
  }

  void open(const Napi::CallbackInfo& info) {
      requireInit();
      if (info.Length() < 2 || !info[1].IsObject()) throw ArgumentError("new Session(model, options): options must be an object");
      Napi::Object options = info[1].As<Napi::Object>();
      Owned<OrtSessionOptions> owned = made<OrtSessionOptions>([](OrtSessionOptions** out) { return ort->CreateSessionOptions(out); });
      OrtSessionOptions* so = owned.get();
      // The GPU its runs go on (the CUDA provider's device_id), for serialising its captures.
      Napi::Value cuda = options.Get("cuda");
      if (cuda.IsObject() && cuda.As<Napi::Object>().Get("deviceId").IsNumber()) cudaOrdinal_ = cuda.As<Napi::Object>().Get("deviceId").As<Napi::Number>().Int32Value();
      // The CUDA provider's constructor synchronises the device, and a shared arena is registered
      // with the environment: never while another thread captures a graph on that GPU.
      std::unique_lock<std::recursive_mutex> capture;
      if (cudaOrdinal_ >= 0) capture = std::unique_lock<std::recursive_mutex>(stowage_cuda::captureLock(cudaOrdinal_));
      providerOptions_ = configure(so, options);
      profiling_ = options.Get("profilePrefix").IsString();
      // Initializers over the caller's memory. `initializers` (AddInitializer): ONNX Runtime uses
      // each in place instead of the model's initializer of that name, so it must outlive the
      // session (kept below); constant, so ONNX Runtime may prepack it. `externalInitializers`
      // (AddExternalInitializers): each replaces an initializer the model stores as external
      // data, copied into the session (the caller's memory is free again once it is made).
      std::vector<Held> initializers = initializersOf(so, options, "initializers", false);
      // alive until the session is made
      std::vector<Held> copied = initializersOf(so, options, "externalInitializers", true);
      if (info[0].IsString()) {
        std::string path = info[0].As<Napi::String>().Utf8Value();
        session_ = made<OrtSession>([&](OrtSession** out) { return ort->CreateSession(env, path.c_str(), so, out); });
      } else {
        Bytes model = bytesOf(info[0], "model");
        session_ = made<OrtSession>([&](OrtSession** out) { return ort->CreateSessionFromArray(env, model.data, model.length, so, out); });
      }
      // The initializers' memory must outlive the session: keep their holders.
      initializers_ = std::move(initializers);
      if (options.Get("useEnvAllocators").IsBoolean() && options.Get("useEnvAllocators").As<Napi::Boolean>().Value()) holdCpuArena();
      own_ = newBound();
      inputNames_ = names(true);
      outputNames_ = names(false);
  }

  // The shared CPU arena, as this session (opened with useEnvAllocators) allocates from it: kept for
  // the process's life for cpuArenaStats (it holds the arena, not the session).
  void holdCpuArena() {
    std::lock_guard<std::mutex> lock(cpuArenaMutex);
    if (cpuArenaAllocator) return;
    OrtAllocator* a = nullptr;
    check(ort->CreateAllocator(session_.get(), cpuArena, &a));
    cpuArenaAllocator = a;
  }

  // The graph's input (or output) names, in its order.
  std::vector<std::string> names(bool inputs) const {
    size_t count = 0;
    check(inputs ? ort->SessionGetInputCount(session_.get(), &count) : ort->SessionGetOutputCount(session_.get(), &count));
    std::vector<std::string> out;
    for (size_t i = 0; i < count; i++) {
      Owned<char> name = made<char>([&](char** n) { return inputs ? ort->SessionGetInputName(session_.get(), i, allocator, n) : ort->SessionGetOutputName(session_.get(), i, allocator, n); });
      out.emplace_back(name.get());
    }
    return out;
  }

  ~Session() override { close(); }

  bool busy() const { return running_; }

  Owned<OrtSession> session_;
  // The session's own binding (bindInput and run on the session itself).
  std::shared_ptr<Bound> own_;
  // Every binding made on it (its own included), cleared when the session is released: an
  // IoBinding must not outlive its session.
  std::vector<std::weak_ptr<Bound>> bindings_;
  bool running_ = false;
  bool releasing_ = false;
  std::vector<Held> initializers_;
  // The CUDA provider's options as ONNX Runtime took them ("" on the CPU).
  std::string providerOptions_;
  // Whether ONNX Runtime profiles this session (its JSON is written at release).
  bool profiling_ = false;
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

  // A new binding on this session, cleared with it.
  std::shared_ptr<Bound> newBound() {
    auto bound = std::make_shared<Bound>();
    bound->binding = made<OrtIoBinding>([&](OrtIoBinding** out) { return ort->CreateIoBinding(session_.get(), out); });
    bindings_.erase(std::remove_if(bindings_.begin(), bindings_.end(), [](const std::weak_ptr<Bound>& b) { return b.expired(); }), bindings_.end());
    bindings_.push_back(bound);
    return bound;
  }

  // A fresh IoBinding with the kept inputs. When it cannot be made, none is left: the next use
  // makes it again (`binding(b)`), so a failure here never leaves a null binding to be dereferenced.
  void rebuildBinding(Bound& b) {
    b.binding.reset();
    Owned<OrtIoBinding> fresh = made<OrtIoBinding>([&](OrtIoBinding** out) { return ort->CreateIoBinding(session_.get(), out); });
    for (auto& [name, held] : b.kept) check(ort->BindInput(fresh.get(), name.c_str(), held.value));
    b.binding = std::move(fresh);
  }

  // The binding, made again first if an earlier rebuild failed.
  OrtIoBinding* binding(Bound& b) {
    if (!b.binding) rebuildBinding(b);
    return b.binding.get();
  }

  // After a refused bind: made anew, and the refusal is what the caller hears, whatever the rebuild does.
  void rebuildAfterRefusal(Bound& b) {
    try {
      rebuildBinding(b);
    } catch (...) {
      // Left without a binding: `binding(b)` makes it at the next use, or says why then.
    }
  }

  // bindInput(tensor) on binding `b`: bound for every later run with it until unbound.
  void bindInputOn(Bound& b, const Napi::CallbackInfo& info) {
    requireOpen();
    if (running_) throw ArgumentError("bindInput while a run is in flight");
    if (info.Length() < 1 || !info[0].IsObject()) throw ArgumentError("bindInput(tensor): tensor must be an object");
    Napi::Object t = info[0].As<Napi::Object>();
    std::string name = nameOf(t, "bound input");
    requireName(inputNames_, name, "input");
    Held held = tensorOf(t, "bound input " + name);
    try {
      check(ort->BindInput(binding(b), name.c_str(), held.value));
    } catch (...) {
      rebuildAfterRefusal(b);
      throw;
    }
    b.kept[name] = std::move(held);
  }

  void unbindInputsOn(Bound& b) {
    requireOpen();
    if (running_) throw ArgumentError("unbindInputs while a run is in flight");
    ort->ClearBoundInputs(binding(b));
    for (auto& [name, held] : b.kept) held.reset();
    b.kept.clear();
  }

  void close() {
    // Releasing a CUDA session frees its GPU memory (synchronising the device): never while
    // another thread captures a graph on the GPU (cuda.h captureLock).
    std::unique_lock<std::recursive_mutex> capture;
    if (cudaOrdinal_ >= 0 && session_) capture = std::unique_lock<std::recursive_mutex>(stowage_cuda::captureLock(cudaOrdinal_));
    if (session_ && profiling_) {
      // Write the profile (ONNX Runtime writes it only when asked or as the session ends); a
      // failure to write it must not stop the session's release.
      char* file = nullptr;
      Owned<OrtStatus> failed(ort->SessionEndProfiling(session_.get(), allocator, &file));
      Owned<char> written(file);
    }
    for (const std::weak_ptr<Bound>& weak : bindings_) {
      if (std::shared_ptr<Bound> b = weak.lock()) b->clear();
    }
    bindings_.clear();
    own_.reset();
    session_.reset();
    for (Held& h : initializers_) h.reset();
    initializers_.clear();
  }

  void runEnded() {
    running_ = false;
    if (releasing_) close();
  }

  // Held around a run: its thread ignores other threads' captures, and a run that may capture a
  // graph (its first kRunsUntilCaptured runs) or is the session's first at its inputs' shapes
  // (cuDNN's algorithm search frees memory) holds its GPU's capture lock. The alternative, a
  // heuristic search wherever actors share a GPU with graphs on, would give every run of those
  // models the kernels a heuristic picks instead of the fastest; the lock costs first runs only.
  class CaptureGuard {
   public:
    CaptureGuard(const Session& session, const RunState& run) {
      if (session.cudaOrdinal_ < 0) return;
      stowage_cuda::ignoreOtherThreadsCaptures();
      bool capturing = false;
      if (run.graphId >= 0) {
        auto at = session.graphRuns_.find(run.graphId);
        capturing = at == session.graphRuns_.end() || at->second < kRunsUntilCaptured;
      }
      if (capturing || run.newShape) lock_ = std::unique_lock<std::recursive_mutex>(stowage_cuda::captureLock(session.cudaOrdinal_));
    }

   private:
    std::unique_lock<std::recursive_mutex> lock_;
  };

  // A run went through: its shape is one the session has run at, and a graph id's runs are counted
  // until its graph is surely captured.
  void ran(const RunState& run) {
    shapesRun_.insert(run.shape);
    if (run.graphId < 0 || cudaOrdinal_ < 0) return;
    int& runs = graphRuns_[run.graphId];
    if (runs < kRunsUntilCaptured) runs++;
  }

  // shapesRun(): how many distinct input shapes its runs have gone through (each one's first run
  // held the capture lock on a GPU).
  Napi::Value ShapesRun(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(shapesRun_.size()));
  }

 private:
  // The GPU of its CUDA provider (-1: the CPU), and the runs each CUDA graph id has had.
  int cudaOrdinal_ = -1;
  std::map<int64_t, int> graphRuns_;
  // The input shapes its runs have gone through (RunState::shape).
  std::set<std::string> shapesRun_;

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
    Napi::Value pattern = options.Get("memoryPattern");
    if (!pattern.IsUndefined()) {
      if (!pattern.IsBoolean()) throw ArgumentError("options.memoryPattern must be a boolean");
      check(pattern.As<Napi::Boolean>().Value() ? ort->EnableMemPattern(so) : ort->DisableMemPattern(so));
    }
    Napi::Value envAllocators = options.Get("useEnvAllocators");
    if (!envAllocators.IsUndefined()) {
      if (!envAllocators.IsBoolean()) throw ArgumentError("options.useEnvAllocators must be a boolean");
      if (envAllocators.As<Napi::Boolean>().Value()) {
        if (!cpuArena) throw ArgumentError("options.useEnvAllocators: no CPU arena is registered with the environment (registerCpuArena first)");
        check(ort->AddSessionConfigEntry(so, "session.use_env_allocators", "1"));
      }
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
    // The session is made on this thread: it must not be refused CUDA's calls by another thread's capture.
    stowage_cuda::ignoreOtherThreadsCaptures();
    // The provider first: appending it loads its library, and fails with ONNX Runtime's words when
    // it cannot (a wrong cuDNN, say). Registering the shared arena before that makes ONNX Runtime
    // 1.30 end the process (std::terminate) instead.
    Owned<OrtCUDAProviderOptionsV2> provider = made<OrtCUDAProviderOptionsV2>([](OrtCUDAProviderOptionsV2** out) { return ort->CreateCUDAProviderOptions(out); });
    check(ort->UpdateCUDAProviderOptions(provider.get(), k.data(), v.data(), k.size()));
    check(ort->SessionOptionsAppendExecutionProvider_CUDA_V2(so, provider.get()));
    Napi::Value shared = c.Get("sharedArena");
    if (shared.IsBoolean() && shared.As<Napi::Boolean>().Value()) {
      shareCudaArena(id.As<Napi::Number>().Int32Value(), keys, values);
      check(ort->AddSessionConfigEntry(so, "session.use_env_allocators", "1"));
    }
    Owned<char> taken = made<char>([&](char** out) { return ort->GetCUDAProviderOptionsAsString(provider.get(), allocator, out); });
    return std::string(taken.get());
  }

  // options.cuda.sharedArena: the GPU's memory for activations comes from one arena for the whole
  // process (ONNX Runtime's allocator registered with the environment, which sessions opened with
  // session.use_env_allocators use in place of an arena each). Each session's own arena keeps the
  // most its runs ever took (a warmed ResNet-50 held 911 MiB on an H200) for good; a catalog of
  // sessions sharing one needs what the largest run takes, once. Registered once per GPU, with the
  // first such session's provider options; the arena grows by what is asked, as the sessions' do.
  static void shareCudaArena(int ordinal, const std::vector<std::string>& keys, const std::vector<std::string>& values) {
    static std::mutex mutex;
    static std::vector<int> shared;
    std::lock_guard<std::mutex> lock(mutex);
    if (std::find(shared.begin(), shared.end(), ordinal) != shared.end()) return;
    std::vector<const char*> arenaKeys{"arena_extend_strategy"};
    std::vector<size_t> arenaValues{1};  // kSameAsRequested
    // The arena's cap is the provider's gpu_mem_limit (runtime.cuda.ort_arena_limit_bytes), as each
    // session's own arena would have it: the arena config's max_mem, which the provider option
    // does not set for an arena registered with the environment.
    for (size_t i = 0; i < keys.size(); i++) {
      if (keys[i] != "gpu_mem_limit") continue;
      const size_t limit = static_cast<size_t>(std::stoull(values[i]));
      if (limit > 0) {
        arenaKeys.push_back("max_mem");
        arenaValues.push_back(limit);
      }
    }
    std::vector<const char*> k, v;
    for (size_t i = 0; i < keys.size(); i++) {
      k.push_back(keys[i].c_str());
      v.push_back(values[i].c_str());
    }
    Owned<OrtArenaCfg> arena = made<OrtArenaCfg>([&](OrtArenaCfg** out) { return ort->CreateArenaCfgV2(arenaKeys.data(), arenaValues.data(), arenaKeys.size(), out); });
    Owned<OrtMemoryInfo> info = made<OrtMemoryInfo>([&](OrtMemoryInfo** out) { return ort->CreateMemoryInfo("Cuda", OrtArenaAllocator, ordinal, OrtMemTypeDefault, out); });
    check(ort->CreateAndRegisterAllocatorV2(env, "CUDAExecutionProvider", info.get(), arena.get(), k.data(), v.data(), k.size()));
    shared.push_back(ordinal);
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
    std::vector<std::string> names = this->names(inputs);
    Napi::Array out = Napi::Array::New(e, names.size());
    for (size_t i = 0; i < names.size(); i++) {
      Owned<OrtTypeInfo> typeInfo = made<OrtTypeInfo>([&](OrtTypeInfo** o) { return inputs ? ort->SessionGetInputTypeInfo(session_.get(), i, o) : ort->SessionGetOutputTypeInfo(session_.get(), i, o); });
      Napi::Object t = Napi::Object::New(e);
      t.Set("name", names[i]);
      // Owned by typeInfo.
      const OrtTensorTypeAndShapeInfo* tensor = nullptr;
      check(ort->CastTypeInfoToTensorInfo(typeInfo.get(), &tensor));
      if (!tensor) {
        t.Set("isTensor", false);
        out.Set(i, t);
        continue;
      }
      ONNXTensorElementDataType type;
      size_t dimsCount = 0;
      check(ort->GetTensorElementType(tensor, &type));
      check(ort->GetDimensionsCount(tensor, &dimsCount));
      std::vector<int64_t> dims(dimsCount);
      std::vector<const char*> symbols(dimsCount, nullptr);
      if (dimsCount) {
        check(ort->GetDimensions(tensor, dims.data(), dimsCount));
        check(ort->GetSymbolicDimensions(tensor, symbols.data(), dimsCount));
      }
      t.Set("isTensor", true);
      t.Set("type", static_cast<int>(type));
      Napi::Array shape = Napi::Array::New(e, dimsCount);
      for (size_t d = 0; d < dimsCount; d++) {
        // A symbolic dim reads as its name; an unnamed free one as -1.
        if (dims[d] < 0 && symbols[d] && symbols[d][0]) shape.Set(d, Napi::String::New(e, symbols[d]));
        else shape.Set(d, Napi::Number::New(e, static_cast<double>(dims[d])));
      }
      t.Set("dims", shape);
      out.Set(i, t);
    }
    return out;
  }

  Napi::Value Inputs(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] { return describe(info.Env(), true); });
  }

  Napi::Value Outputs(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] { return describe(info.Env(), false); });
  }

  // bindInput(tensor): bound for every later run until unbindInputs() (a weightless session's weights).
  Napi::Value BindInput(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      requireOpen();
      bindInputOn(*own_, info);
      return info.Env().Undefined();
    });
  }

  Napi::Value UnbindInputs(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      requireOpen();
      unbindInputsOn(*own_);
      return info.Env().Undefined();
    });
  }

  Napi::Value Run(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      requireOpen();
      return runOn(own_, info);
    });
  }
  Napi::Value RunSync(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      requireOpen();
      return runSyncOn(own_, info);
    });
  }
  // run and runSync with binding `b` (the session's own, or a model's: Binding).
  Napi::Value runOn(const std::shared_ptr<Bound>& b, const Napi::CallbackInfo& info);
  Napi::Value runSyncOn(const std::shared_ptr<Bound>& b, const Napi::CallbackInfo& info);
  // Check and bind a run's tensors in `b` (run and runSync alike); the state holds what they view.
  std::unique_ptr<RunState> prepare(Bound& b, const Napi::CallbackInfo& info);

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
  friend class Binding;
};

// Every bound output, in the order they were asked for: a given buffer as it was given (ONNX
// Runtime wrote into it), an allocated one as an ArrayBuffer over ONNX Runtime's memory.
Napi::Array collectOutputs(Napi::Env e, Bound& bound, RunState* state) {
  OrtValue** values = nullptr;
  size_t count = 0;
  check(ort->GetBoundOutputValues(bound.binding.get(), allocator, &values, &count));
  Owned<OrtValue*> array(values);
  // Each value owned from here; one handed over to JavaScript below is released from this list.
  std::vector<Owned<OrtValue>> owned;
  for (size_t i = 0; i < count; i++) owned.emplace_back(values[i]);
  array.reset();
  if (count != state->outputs.size()) throw stowage::OrtFailure(ORT_FAIL, "ONNX Runtime returned " + std::to_string(count) + " outputs for " + std::to_string(state->outputs.size()) + " bound");
  Napi::Array out = Napi::Array::New(e, count);
  for (size_t i = 0; i < count; i++) {
    auto& [name, given] = state->outputs[i];
    int type = 0;
    std::vector<int64_t> dims;
    shapeOf(owned[i].get(), type, dims);
    Napi::Object t = Napi::Object::New(e);
    t.Set("name", name);
    t.Set("type", type);
    Napi::Array shape = Napi::Array::New(e, dims.size());
    for (size_t d = 0; d < dims.size(); d++) shape.Set(d, Napi::Number::New(e, static_cast<double>(dims[d])));
    t.Set("dims", shape);
    if (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
      Napi::ArrayBuffer ab = joinElements(e, owned[i].get());
      t.Set("data", Napi::Uint8Array::New(e, ab.ByteLength(), ab, 0));
    } else if (!given.keep.IsEmpty()) {
      t.Set("data", given.keep.Value());
    } else {
      void* data = nullptr;
      check(ort->GetTensorMutableData(owned[i].get(), &data));
      size_t bytes = elementsOf(dims, name) * elementBytes(type);
      // Handed over without a copy: the ArrayBuffer views ONNX Runtime's memory and releases the
      // OrtValue (one reference of it) when collected.
      Napi::ArrayBuffer ab = bytes
        ? Napi::ArrayBuffer::New(e, data, bytes, [](Napi::Env, void*, OrtValue* v) { ort->ReleaseValue(v); }, owned[i].get())
        : Napi::ArrayBuffer::New(e, 0);
      if (bytes) owned[i].release();  // the ArrayBuffer's finalizer owns it now
      t.Set("data", Napi::Uint8Array::New(e, bytes, ab, 0));
    }
    out.Set(i, t);
  }
  return out;
}


class RunWorker : public Napi::AsyncWorker {
 public:
  RunWorker(Napi::Env e, Session* session, std::shared_ptr<Bound> bound, std::unique_ptr<RunState> state)
      : Napi::AsyncWorker(e, "stowage.ort.run"), deferred_(Napi::Promise::Deferred::New(e)), session_(session), bound_(std::move(bound)), state_(std::move(state)) {
    self_ = Napi::Persistent(session->Value());
  }

  Napi::Promise Promise() { return deferred_.Promise(); }

  void terminate() {
    if (!state_ || !state_->options) return;
    Owned<OrtStatus> ignored(ort->RunOptionsSetTerminate(state_->options.get()));
  }

 protected:
  // On a libuv thread: nothing here may touch JavaScript, so a failure is kept for OnOK.
  void Execute() override {
    try {
      Session::CaptureGuard capture(*session_, *state_);
      check(ort->RunWithBinding(session_->session_.get(), state_->options.get(), bound_->binding.get()));
    } catch (const stowage::Failure& err) {
      failure_ = std::make_unique<stowage::Failure>(err);
    } catch (const std::bad_alloc&) {
      failure_ = std::make_unique<stowage::AllocationFailure>("out of host memory (std::bad_alloc) during the run");
    } catch (const std::exception& err) {
      failure_ = std::make_unique<stowage::Failure>(stowage::Origin::Binding, 0, err.what());
    }
  }

  void OnOK() override {
    Napi::Env e = Env();
    Napi::HandleScope scope(e);
    if (failure_) {
      finish();
      deferred_.Reject(stowage::toJs(e, *failure_).Value());
      return;
    }
    try {
      session_->ran(*state_);
      Napi::Array results = entry(e, [&] { return collectOutputs(e, *bound_, state_.get()); });
      finish();
      deferred_.Resolve(results);
    } catch (const Napi::Error& err) {
      finish();
      deferred_.Reject(err.Value());
    }
  }

  void OnError(const Napi::Error& err) override {
    finish();
    deferred_.Reject(err.Value());
  }

 private:
  void finish() {
    if (bound_->binding) ort->ClearBoundOutputs(bound_->binding.get());
    session_->current_ = nullptr;
    session_->runEnded();
    state_.reset();
    self_.Reset();
  }

  Napi::Promise::Deferred deferred_;
  Session* session_;
  // The binding it runs with, kept alive until the run ends (a session released meanwhile is
  // closed only then, and clears it).
  std::shared_ptr<Bound> bound_;
  std::unique_ptr<RunState> state_;
  std::unique_ptr<stowage::Failure> failure_;
  Napi::ObjectReference self_;
};

// Check a run's arguments and bind its tensors: this run's inputs over the kept ones, its
// outputs afresh. A refusal leaves the binding as it was (made anew with the kept inputs).
std::unique_ptr<RunState> Session::prepare(Bound& b, const Napi::CallbackInfo& info) {
  bool rebinding = false;  // whether this call has started to change the binding (undone if it fails)
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
        state->options = made<OrtRunOptions>([](OrtRunOptions** out) { return ort->CreateRunOptions(out); });
        check(ort->AddRunConfigEntry(state->options.get(), "gpu_graph_id", std::to_string(static_cast<int64_t>(id)).c_str()));
        state->graphId = static_cast<int64_t>(id);
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
      if (b.kept.count(inputNames[i])) throw ArgumentError("input " + inputNames[i] + " is bound with bindInput: unbind it first");
    }
    for (const std::string& needed : inputNames_) {
      bool given = b.kept.count(needed) > 0;
      for (const std::string& n : inputNames) given = given || n == needed;
      if (!given) throw ArgumentError("input " + needed + " is missing: every input the graph takes must be given (or bound with bindInput)");
    }
    for (size_t i = 0; i < inputNames.size(); i++) {
      state->shape += inputNames[i] + "[";
      for (int64_t d : state->inputs[i].dims) state->shape += std::to_string(d) + ",";
      state->shape += "];";
    }
    state->newShape = shapesRun_.count(state->shape) == 0;
    for (size_t i = 0; i < state->outputs.size(); i++) {
      requireName(outputNames_, state->outputs[i].first, "output");
      for (size_t j = 0; j < i; j++) if (state->outputs[j].first == state->outputs[i].first) throw ArgumentError("output " + state->outputs[i].first + " is asked for twice");
    }
    OrtIoBinding* bound = binding(b);
    rebinding = true;
    ort->ClearBoundOutputs(bound);
    for (size_t i = 0; i < state->inputs.size(); i++) check(ort->BindInput(bound, inputNames[i].c_str(), state->inputs[i].value));
    for (auto& [name, held] : state->outputs) {
      if (held.value) check(ort->BindOutput(bound, name.c_str(), held.value));
      else check(ort->BindOutputToDevice(bound, name.c_str(), cpu));
    }
    return state;
  } catch (...) {
    if (rebinding) rebuildAfterRefusal(b);
    throw;
  }
}

// run(inputs: Tensor[], outputs: (string | Tensor)[]): Promise<OutputTensor[]>, on a libuv thread.
Napi::Value Session::runOn(const std::shared_ptr<Bound>& b, const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  std::unique_ptr<RunState> state = prepare(*b, info);
  // terminate() sets its flag.
  if (!state->options) state->options = made<OrtRunOptions>([](OrtRunOptions** out) { return ort->CreateRunOptions(out); });
  auto* worker = new RunWorker(e, this, b, std::move(state));
  Napi::Promise promise = worker->Promise();
  running_ = true;
  current_ = worker;
  worker->Queue();
  return promise;
}

// runSync(inputs, outputs): OutputTensor[], on the calling thread: for runs shorter than the
// hop to a libuv thread and back (tens of microseconds), which would cost more than they save.
Napi::Value Session::runSyncOn(const std::shared_ptr<Bound>& b, const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  std::unique_ptr<RunState> state = prepare(*b, info);
  struct Clear {
    OrtIoBinding* binding;
    ~Clear() {
      if (binding) ort->ClearBoundOutputs(binding);
    }
  } clear{b->binding.get()};
  {
    CaptureGuard capture(*this, *state);
    check(ort->RunWithBinding(session_.get(), state->options.get(), b->binding.get()));
  }
  ran(*state);
  return collectOutputs(e, *b, state.get());
}

// new Binding(session): an IoBinding of its own on `session`, for one model of several sharing the
// session (one graph, each model's weights): its weights bound once in it, its runs made with it.
// Runs of the session still go one at a time, whichever binding they use. Released with the
// session, or before by release().
class Binding : public Napi::ObjectWrap<Binding> {
 public:
  static Napi::Function Define(Napi::Env e) {
    return DefineClass(e, "Binding", {
      InstanceMethod("bindInput", &Binding::BindInput),
      InstanceMethod("unbindInputs", &Binding::UnbindInputs),
      InstanceMethod("run", &Binding::Run),
      InstanceMethod("runSync", &Binding::RunSync),
      InstanceMethod("release", &Binding::Release),
    });
  }

  explicit Binding(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Binding>(info) {
    entry(info.Env(), [&] {
      if (info.Length() < 1 || !info[0].IsObject() || !info[0].As<Napi::Object>().CheckTypeTag(&kSessionTag)) throw ArgumentError("new Binding(session): session must be a Session");
      Napi::Object o = info[0].As<Napi::Object>();
      Session* s = Session::Unwrap(o);
      s->requireOpen();
      bound_ = s->newBound();
      // The session object stays alive (and so open, unless released) while a binding of it does.
      session_ = Napi::Persistent(o);
    });
  }

 private:
  // The session, or an error once it or this binding has been released.
  Session& session() {
    if (!bound_) throw ArgumentError("the binding has been released");
    Session* s = Session::Unwrap(session_.Value());
    s->requireOpen();
    return *s;
  }

  Napi::Value BindInput(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      session().bindInputOn(*bound_, info);
      return info.Env().Undefined();
    });
  }

  Napi::Value UnbindInputs(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      session().unbindInputsOn(*bound_);
      return info.Env().Undefined();
    });
  }

  Napi::Value Run(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] { return session().runOn(bound_, info); });
  }

  Napi::Value RunSync(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] { return session().runSyncOn(bound_, info); });
  }

  // Frees its IoBinding and lets go of its kept inputs now (a run in flight with it keeps them
  // until it ends); the session stays open for its other bindings.
  Napi::Value Release(const Napi::CallbackInfo& info) {
    // A run in flight with it holds it (RunWorker::bound_) until the run ends.
    bound_.reset();
    session_.Reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<Bound> bound_;
  Napi::ObjectReference session_;
};

// terminate(): the run in flight stops at its next check and rejects; nothing happens without one.
Napi::Value Session::Terminate(const Napi::CallbackInfo& info) {
  if (current_) current_->terminate();
  return Napi::Boolean::New(info.Env(), current_ != nullptr);
}

// init(libraryPath, { globalIntraOpThreads?, globalInterOpThreads?, globalAllowSpinning? }): version
Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
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
  try {
    // Owned until every step has succeeded; then the process keeps them.
    Owned<OrtEnv> madeEnv;
    Owned<OrtMemoryInfo> madeCpu;
    Napi::Object options = info.Length() > 1 && info[1].IsObject() ? info[1].As<Napi::Object>() : Napi::Object::New(e);
    Napi::Value intra = options.Get("globalIntraOpThreads");
    if (intra.IsNumber()) {
      Owned<OrtThreadingOptions> threading = made<OrtThreadingOptions>([](OrtThreadingOptions** out) { return ort->CreateThreadingOptions(out); });
      check(ort->SetGlobalIntraOpNumThreads(threading.get(), intra.As<Napi::Number>().Int32Value()));
      Napi::Value inter = options.Get("globalInterOpThreads");
      check(ort->SetGlobalInterOpNumThreads(threading.get(), inter.IsNumber() ? inter.As<Napi::Number>().Int32Value() : 1));
      Napi::Value spin = options.Get("globalAllowSpinning");
      check(ort->SetGlobalSpinControl(threading.get(), spin.IsBoolean() && spin.As<Napi::Boolean>().Value() ? 1 : 0));
      madeEnv = made<OrtEnv>([&](OrtEnv** out) { return ort->CreateEnvWithGlobalThreadPools(ORT_LOGGING_LEVEL_WARNING, "stowage", threading.get(), out); });
    } else {
      madeEnv = made<OrtEnv>([](OrtEnv** out) { return ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "stowage", out); });
    }
    madeCpu = made<OrtMemoryInfo>([](OrtMemoryInfo** out) { return ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, out); });
    check(ort->GetAllocatorWithDefaultOptions(&allocator));
    globalPools = intra.IsNumber();
    env = madeEnv.release();
    cpu = madeCpu.release();
  } catch (...) {
    ort = nullptr;
    throw;
  }
  version = base->GetVersionString();
  loadedFrom = path;
  return Napi::String::New(e, version);
}

// registerCpuArena(): whether this call registered it (false: it was already). One ONNX Runtime
// arena for CPU memory, registered with the (process-wide) environment: sessions opened with
// useEnvAllocators take their activations from it instead of an arena each. Each session's own
// arena keeps the most its runs ever took, for as long as it is open (ResNet-50 after batch 32:
// ~270 MB per session); shared, the process keeps what its largest concurrent runs took, once.
// It grows by what is asked (kSameAsRequested), not by powers of two as an arena's default is, so
// it holds what the runs asked for and not up to twice that.
Napi::Value RegisterCpuArena(const Napi::CallbackInfo& info) {
  requireInit();
  std::lock_guard<std::mutex> lock(cpuArenaMutex);
  if (cpuArena) return Napi::Boolean::New(info.Env(), false);
  std::vector<const char*> keys{"arena_extend_strategy"};
  std::vector<size_t> values{1};  // kSameAsRequested
  Owned<OrtArenaCfg> arena = made<OrtArenaCfg>([&](OrtArenaCfg** out) { return ort->CreateArenaCfgV2(keys.data(), values.data(), keys.size(), out); });
  Owned<OrtMemoryInfo> info_ = made<OrtMemoryInfo>([](OrtMemoryInfo** out) { return ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, out); });
  check(ort->CreateAndRegisterAllocator(env, info_.get(), arena.get()));
  cpuArena = info_.release();  // kept for the process's life, as the registration is
  return Napi::Boolean::New(info.Env(), true);
}

// cpuArenaStats(): the registered CPU arena's own counts (AllocatorGetStats: InUse, MaxInUse,
// TotalAllocated, NumAllocs, NumReserves, ...) as numbers ({} before a session has opened on it),
// or null when none is registered.
Napi::Value CpuArenaStats(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  requireInit();
  std::lock_guard<std::mutex> lock(cpuArenaMutex);
  if (!cpuArena) return e.Null();
  // Before any session has used it, it has handed out nothing.
  if (!cpuArenaAllocator) return Napi::Object::New(e);
  Owned<OrtKeyValuePairs> stats = made<OrtKeyValuePairs>([&](OrtKeyValuePairs** out) { return ort->AllocatorGetStats(cpuArenaAllocator, out); });
  const char* const* keys = nullptr;
  const char* const* values = nullptr;
  size_t count = 0;
  ort->GetKeyValuePairs(stats.get(), &keys, &values, &count);
  Napi::Object out = Napi::Object::New(e);
  for (size_t i = 0; i < count; i++) out.Set(keys[i], Napi::Number::New(e, std::strtod(values[i], nullptr)));
  return out;
}

// heapBytesInUse(): bytes the C heap has handed out and not had back, over every arena of the
// process (glibc's malloc_info: what the arenas took from the system and the mmapped chunks, less
// their free chunks; mallinfo2 counts only the main thread's arena, and a device thread allocates
// from one of its own). Around a session's open on the device thread, its growth is what the
// session itself holds in host memory (graph, kernels, plans), give or take other threads' work.
Napi::Value HeapBytesInUse(const Napi::CallbackInfo& info) {
  char* text = nullptr;
  size_t length = 0;
  FILE* out = open_memstream(&text, &length);
  if (!out) throw stowage::Failure(stowage::Origin::Binding, 0, "heapBytesInUse: open_memstream failed");
  int failed = malloc_info(0, out);
  fclose(out);
  std::string xml(text ? text : "", length);
  free(text);
  if (failed) throw stowage::Failure(stowage::Origin::Binding, 0, "heapBytesInUse: malloc_info failed");
  // The process-wide totals follow the last </heap>: <total type="fast|rest|mmap" count= size=/>
  // and <system type="current" size=/>.
  size_t totals = xml.rfind("</heap>");
  if (totals == std::string::npos) totals = 0;
  auto sizeOf = [&](const std::string& tag) -> double {
    size_t at = xml.find(tag, totals);
    if (at == std::string::npos) return 0;
    size_t size = xml.find("size=\"", at);
    if (size == std::string::npos) return 0;
    return std::strtod(xml.c_str() + size + 6, nullptr);
  };
  double inUse = sizeOf("<system type=\"current\"") + sizeOf("<total type=\"mmap\"") - sizeOf("<total type=\"fast\"") - sizeOf("<total type=\"rest\"");
  return Napi::Number::New(info.Env(), inUse > 0 ? inUse : 0);
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
      InstanceMethod("uploadFromHost", &DeviceMemory::UploadFromHost),
      InstanceMethod("copyFromDevice", &DeviceMemory::CopyFromDevice),
      InstanceMethod("ipcHandle", &DeviceMemory::IpcHandle),
      InstanceMethod("markUpload", &DeviceMemory::MarkUpload),
      InstanceMethod("waitUpload", &DeviceMemory::WaitUpload),
      InstanceMethod("release", &DeviceMemory::Release),
      InstanceAccessor("ipcAllocation", &DeviceMemory::IpcAllocation, nullptr),
    });
  }

  std::shared_ptr<DeviceBlock> block;

  explicit DeviceMemory(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceMemory>(info) {
    entry(info.Env(), [&] {
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
        // At least a byte, so that an empty block still has an address of its own. ONNX Runtime's
        // CPU allocator throws std::bad_alloc when refused (or, another build, answers null).
        try {
          b->data = b->allocator->Alloc(b->allocator, b->bytes ? b->bytes : 1);
        } catch (const std::bad_alloc&) {
          b->data = nullptr;
        }
        if (!b->data) throw stowage::AllocationFailure("device cpu: ONNX Runtime's allocator cannot allocate " + std::to_string(b->bytes) + " bytes");
      } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 9 && device.find_first_not_of("0123456789", 5) == std::string::npos) {
        if (!stowage_cuda::runtime()) throw ArgumentError("device " + device + ": no allocator for it in this process (the CUDA libraries are not loaded: backend cuda loads them)");
        b->cudaOrdinal = std::stoi(device.substr(5));
        b->info = cudaMemoryInfo(b->cudaOrdinal);
        if (info.Length() > 2 && !info[2].IsUndefined()) {
          // new DeviceMemory(bytes, 'cuda:N', ipcHandle): another process's memory, opened here.
          stowage::Bytes handle = bytesOf(info[2], "new DeviceMemory(bytes, device, ipcHandle)");
          if (handle.length != stowage_cuda::kIpcHandleBytes) {
            throw ArgumentError("a CUDA IPC handle is " + std::to_string(stowage_cuda::kIpcHandleBytes) + " bytes (cudaIpcMemHandle_t), not " + std::to_string(handle.length));
          }
          stowage_cuda::CudaIpcHandle h;
          // copy: the 64-byte handle, not tensor bytes
          std::memcpy(h.reserved, handle.data, stowage_cuda::kIpcHandleBytes);
          b->data = stowage_cuda::ipcOpen(b->cudaOrdinal, h, "device " + device);
          b->ipc = true;
          // A region declared larger than the allocation would send kernels past its end (a fault
          // that poisons the GPU for the whole process): refused. One whose size the driver cannot
          // tell (cuMemGetAddressRange has not run on IPC-imported memory everywhere) is taken at
          // the client's byte size, as Triton takes it: `ipcAllocation` says why, for a warning.
          size_t actual = 0;
          std::string why;
          if (stowage_cuda::allocationBytesFrom(b->cudaOrdinal, b->data, actual, why)) {
            b->allocationBytes = actual;
          } else {
            b->unmeasured = why;
          }
          // The GPU the allocation is on, for the caller to check against the client's device_id.
          int gpu = -1;
          std::string whyGpu;
          if (stowage_cuda::allocationDeviceOf(b->cudaOrdinal, b->data, gpu, whyGpu)) {
            b->allocationGpu = gpu;
          } else {
            b->unmeasured += (b->unmeasured.empty() ? "" : "; ") + whyGpu;
          }
          if (b->allocationBytes > 0 && actual < b->bytes) {
            throw ArgumentError("the CUDA IPC handle's allocation holds " + std::to_string(actual) + " bytes, fewer than the region's byte_size " + std::to_string(b->bytes));
          }
        } else {
          b->data = stowage_cuda::deviceAlloc(b->cudaOrdinal, b->bytes, device);
        }
      } else {
        throw ArgumentError("new DeviceMemory(bytes, device): device must be 'cpu' or 'cuda:N', not '" + device + "'");
      }
      block = std::move(b);
      Value().TypeTag(&kDeviceMemoryTag);
    });
  }

 private:
  Napi::Value Bytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), block ? static_cast<double>(block->bytes) : 0);
  }
  // Of memory opened from a CUDA IPC handle: { gpu, bytes, unmeasured } as the driver told them
  // (gpu -1 and bytes 0 where it could not, `unmeasured` saying why); null for memory of our own.
  Napi::Value IpcAllocation(const Napi::CallbackInfo& info) {
    Napi::Env e = info.Env();
    if (!block || !block->ipc) return e.Null();
    Napi::Object out = Napi::Object::New(e);
    out.Set("gpu", block->allocationGpu);
    out.Set("bytes", static_cast<double>(block->allocationBytes));
    out.Set("unmeasured", block->unmeasured.empty() ? e.Null() : Napi::String::New(e, block->unmeasured));
    return out;
  }
  Napi::Value Device(const Napi::CallbackInfo& info) {
    return block ? Napi::String::New(info.Env(), block->device) : info.Env().Null();
  }

  const DeviceBlock& open(const char* call) const {
    if (!block) throw ArgumentError(std::string(call) + ": the device memory has been released");
    return *block;
  }

  // Host bytes [src] -> device [offset, offset + src.length), or device -> host [dst].
  void copy(const Napi::CallbackInfo& info, bool toDevice) {
    const char* call = toDevice ? "copyFromHost(src, offset)" : "copyToHost(dst, offset)";
    const DeviceBlock& d = open(call);
    stowage::Bytes host = bytesOf(info.Length() > 0 ? info[0] : info.Env().Undefined(), call);
    size_t at = offsetOf(info.Length() > 1 ? info[1] : info.Env().Undefined(), call);
    if (at > d.bytes || host.length > d.bytes - at) {
      throw ArgumentError(std::string(call) + ": " + std::to_string(host.length) + " bytes at offset " + std::to_string(at) + " do not fit in the device memory's " + std::to_string(d.bytes));
    }
    if (host.length == 0) return;
    uint8_t* device = static_cast<uint8_t*>(d.data) + at;
    if (d.info == cpu) {
      // The CPU device's memory is host memory: ONNX Runtime registers no data transfer for it
      // (CopyTensors answers NOT_IMPLEMENTED), and a memcpy is what one would do.
      // copy: host <-> the CPU device's memory (the weight arena's one copy per cold load)
      std::memmove(toDevice ? device : host.data, toDevice ? host.data : device, host.length);
      return;
    }
    // A GPU (cuda.h says how the copy is ordered against ONNX Runtime's stream). With `wait` false
    // the caller calls synchronize() after its last copy (a model's weights: one wait for all its
    // tensors), and keeps `src` alive and unchanged until then.
    std::string what = std::string(call) + " on " + d.device;
    if (toDevice) {
      bool wait = info.Length() < 3 || !info[2].IsBoolean() || info[2].As<Napi::Boolean>().Value();
      stowage_cuda::copyToDevice(d.cudaOrdinal, device, host.data, host.length, wait, what);
    } else {
      stowage_cuda::copyToHost(d.cudaOrdinal, host.data, device, host.length, what);
    }
  }

  // synchronize(): every copy issued without waiting (copyFromHost(src, offset, false)) has landed.
  Napi::Value Synchronize(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const DeviceBlock& d = open("synchronize()");
      if (d.cudaOrdinal >= 0) stowage_cuda::synchronize(d.cudaOrdinal, "synchronize() on " + d.device);
      return info.Env().Undefined();
    });
  }

  // moveWithin(to, from, length): bytes [from, from + length) to [to, to + length) in this memory
  // (compaction of the weight arena), overlapping ranges allowed.
  Napi::Value MoveWithin(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const char* call = "moveWithin(to, from, length)";
      const DeviceBlock& d = open(call);
      Napi::Value undef = info.Env().Undefined();
      size_t to = offsetOf(info.Length() > 0 ? info[0] : undef, call);
      size_t from = offsetOf(info.Length() > 1 ? info[1] : undef, call);
      size_t length = offsetOf(info.Length() > 2 ? info[2] : undef, call);
      if (to > d.bytes || from > d.bytes || length > d.bytes - to || length > d.bytes - from) {
        throw ArgumentError(std::string(call) + ": " + std::to_string(length) + " bytes from " + std::to_string(from) + " to " + std::to_string(to) + " do not fit in the device memory's " + std::to_string(d.bytes));
      }
      uint8_t* base = static_cast<uint8_t*>(d.data);
      if (length == 0 || to == from) return undef;
      // copy: a live block slid down within the device memory (compaction; counted as the bytes it moves)
      if (d.info == cpu) std::memmove(base + to, base + from, length);
      else stowage_cuda::moveWithin(d.cudaOrdinal, base, to, from, length, std::string(call) + " on " + d.device);
      return undef;
    });
  }

  // Uploads beside execution (cuda.h UploadStream): uploadFromHost(src, offset) issues a copy on
  // this memory's upload stream; markUpload() closes the group issued since the last mark and
  // answers its id; waitUpload(id) waits and answers the ms the group's
  // copies took. On the CPU device the copies are made at once (a memmove, timed): there is no
  // engine to copy beside the cores, and the caller copies while a run goes on another thread.
  std::unique_ptr<stowage_cuda::UploadStream> uploads_;
  double cpuGroupMs_ = 0;
  uint32_t cpuNextMark_ = 1;
  std::map<uint32_t, double> cpuGroups_;

  Napi::Value UploadFromHost(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const char* call = "uploadFromHost(src, offset)";
      const DeviceBlock& d = open(call);
      stowage::Bytes host = bytesOf(info.Length() > 0 ? info[0] : info.Env().Undefined(), call);
      size_t at = offsetOf(info.Length() > 1 ? info[1] : info.Env().Undefined(), call);
      if (at > d.bytes || host.length > d.bytes - at) {
        throw ArgumentError(std::string(call) + ": " + std::to_string(host.length) + " bytes at offset " + std::to_string(at) + " do not fit in the device memory's " + std::to_string(d.bytes));
      }
      uint8_t* device = static_cast<uint8_t*>(d.data) + at;
      if (host.length == 0) return info.Env().Undefined();
      if (d.info == cpu) {
        auto started = std::chrono::steady_clock::now();
        std::memmove(device, host.data, host.length);  // copy: (as above, the CPU device's memory)
        cpuGroupMs_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
        return info.Env().Undefined();
      }
      if (!uploads_) uploads_ = std::make_unique<stowage_cuda::UploadStream>(d.cudaOrdinal, d.device);
      uploads_->copy(device, host.data, host.length);
      return info.Env().Undefined();
    });
  }

  Napi::Value MarkUpload(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const DeviceBlock& d = open("markUpload()");
      if (d.info == cpu) {
        uint32_t id = cpuNextMark_++;
        cpuGroups_[id] = cpuGroupMs_;
        cpuGroupMs_ = 0;
        return Napi::Number::New(info.Env(), id);
      }
      if (!uploads_) uploads_ = std::make_unique<stowage_cuda::UploadStream>(d.cudaOrdinal, d.device);
      return Napi::Number::New(info.Env(), uploads_->mark());
    });
  }

  uint32_t markOf(const Napi::CallbackInfo& info, const char* call) {
    if (info.Length() < 1 || !info[0].IsNumber()) throw ArgumentError(std::string(call) + ": id must be a number from markUpload()");
    return info[0].As<Napi::Number>().Uint32Value();
  }

  Napi::Value WaitUpload(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const DeviceBlock& d = open("waitUpload(id)");
      uint32_t id = markOf(info, "waitUpload(id)");
      if (d.info == cpu) {
        auto at = cpuGroups_.find(id);
        if (at == cpuGroups_.end()) throw ArgumentError("upload " + std::to_string(id) + " on cpu is not in flight (waited for already?)");
        double ms = at->second;
        cpuGroups_.erase(at);
        return Napi::Number::New(info.Env(), ms);
      }
      if (!uploads_) throw ArgumentError("waitUpload(id): no upload was issued on " + d.device);
      return Napi::Number::New(info.Env(), uploads_->wait(id));
    });
  }

  // copyFromDevice(src, srcOffset, offset, bytes): `bytes` of another device memory (this GPU's, or
  // another's: CUDA shared memory) into this one, waited for; a memmove between CPU memories.
  Napi::Value CopyFromDevice(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const char* call = "copyFromDevice(src, srcOffset, offset, bytes)";
      const DeviceBlock& d = open(call);
      Napi::Value undef = info.Env().Undefined();
      std::shared_ptr<DeviceBlock>* src = info.Length() > 0 && info[0].IsObject() ? blockOf(info[0].As<Napi::Object>()) : nullptr;
      if (!src || !*src) throw ArgumentError(std::string(call) + ": src must be a DeviceMemory not released");
      const DeviceBlock& s = **src;
      size_t from = offsetOf(info.Length() > 1 ? info[1] : undef, call);
      size_t to = offsetOf(info.Length() > 2 ? info[2] : undef, call);
      size_t bytes = offsetOf(info.Length() > 3 ? info[3] : undef, call);
      if (from > s.bytes || bytes > s.bytes - from || to > d.bytes || bytes > d.bytes - to) {
        throw ArgumentError(std::string(call) + ": " + std::to_string(bytes) + " bytes from " + std::to_string(from) + " of " + std::to_string(s.bytes) + " to " + std::to_string(to) + " of " + std::to_string(d.bytes) + " do not fit");
      }
      if (bytes == 0) return undef;
      uint8_t* dst = static_cast<uint8_t*>(d.data) + to;
      const uint8_t* from_ = static_cast<const uint8_t*>(s.data) + from;
      if (d.info == cpu && s.info == cpu) {
        std::memmove(dst, from_, bytes);  // copy: (the CPU device's stand-in for a copy between GPU memories)
        return undef;
      }
      if (d.cudaOrdinal < 0 || s.cudaOrdinal < 0) throw ArgumentError(std::string(call) + ": between " + s.device + " and " + d.device + ": copy through the host instead");
      stowage_cuda::copyDevices(d.cudaOrdinal, dst, from_, bytes, std::string(call) + " from " + s.device + " to " + d.device);
      return undef;
    });
  }

  // ipcHandle(): the CUDA IPC handle another process opens this memory with (64 bytes).
  Napi::Value IpcHandle(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      const DeviceBlock& d = open("ipcHandle()");
      if (d.cudaOrdinal < 0 || d.ipc) throw ArgumentError("ipcHandle(): only memory this process allocated on a GPU has one, not " + d.device + (d.ipc ? " opened from a handle" : ""));
      stowage_cuda::CudaIpcHandle h = stowage_cuda::ipcHandle(d.cudaOrdinal, d.data, "ipcHandle() on " + d.device);
      return Napi::Buffer<uint8_t>::Copy(info.Env(), reinterpret_cast<const uint8_t*>(h.reserved), stowage_cuda::kIpcHandleBytes);
    });
  }

  Napi::Value CopyFromHost(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      copy(info, true);
      return info.Env().Undefined();
    });
  }
  Napi::Value CopyToHost(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      copy(info, false);
      return info.Env().Undefined();
    });
  }

  // Free now, unless a session's tensor still views it (an input bound, a run in flight).
  Napi::Value Release(const Napi::CallbackInfo& info) {
    return entry(info.Env(), [&] {
      if (block && block.use_count() > 1) {
        throw ArgumentError("release(): the device memory is still viewed by " + std::to_string(block.use_count() - 1) + " tensor(s) of a session (unbind or wait for the run)");
      }
      uploads_.reset();  // waits for copies still in flight into this memory
      block.reset();
      return info.Env().Undefined();
    });
  }
};

std::shared_ptr<DeviceBlock>* blockOf(const Napi::Object& o) {
  if (!o.CheckTypeTag(&kDeviceMemoryTag)) return nullptr;
  return &DeviceMemory::Unwrap(o)->block;
}

// ortFailure(ortCode, message): the error the binding raises when ONNX Runtime answers that status.
// What a GPU's failures look like (a CUDA library's "<LIBRARY> failure <N>: ...") cannot be made to
// happen on a machine without one; this lets their reading be tested anywhere.
Napi::Value OrtFailureOf(const Napi::CallbackInfo& info) {
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsString()) throw ArgumentError("ortFailure(ortCode, message)");
  return stowage::toJs(info.Env(), stowage::OrtFailure(info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::String>().Utf8Value())).Value();
}

Napi::Object Module(Napi::Env e, Napi::Object exports) {
  exports.Set("DeviceMemory", DeviceMemory::Define(e));
  stowage_cuda::define(e, exports);
  exports.Set("init", Napi::Function::New(e, stowage::entered<Init>));
  exports.Set("registerCpuArena", Napi::Function::New(e, stowage::entered<RegisterCpuArena>));
  exports.Set("cpuArenaStats", Napi::Function::New(e, stowage::entered<CpuArenaStats>));
  exports.Set("heapBytesInUse", Napi::Function::New(e, stowage::entered<HeapBytesInUse>));
  exports.Set("ortFailure", Napi::Function::New(e, stowage::entered<OrtFailureOf>));
  exports.Set("apiVersion", Napi::Number::New(e, ORT_API_VERSION));
  exports.Set("Session", Session::Define(e));
  exports.Set("Binding", Binding::Define(e));
  return exports;
}

}  // namespace

NODE_API_MODULE(stowage_ort, Module)

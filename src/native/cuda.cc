// CUDA for the binding, loaded at run time (cuda.h): the libraries the CUDA execution provider
// needs, the GPUs as NVML describes them, host memory pinned for fast host-to-device copies, and
// device memory with its copies.
// Nothing here links against CUDA: a machine with no GPU builds and loads the binding unchanged,
// and every call answers a clear error there instead.
#include "cuda.h"

#include "buffers.h"
#include "failure.h"
#include "move-plan.h"

#include <dirent.h>
#include <dlfcn.h>
#include <napi.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace stowage_cuda {
namespace {

std::mutex loadMutex;
Runtime table;
bool loaded = false;
size_t (*cudnnGetVersionFn)() = nullptr;

bool isFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// dlopen `name` from the first of `dirs` that holds it, else by name (the loader's own path).
void* open(const std::string& name, const std::vector<std::string>& dirs, std::string& from, std::string& error) {
  for (const std::string& dir : dirs) {
    std::string path = dir + "/" + name;
    if (!isFile(path)) continue;
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (h) {
      from = path;
      return h;
    }
    error = dlerror();
    return nullptr;
  }
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h) from = name;
  else error = dlerror();
  return h;
}

template <typename F>
void bind(void* lib, const char* symbol, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!fn) throw stowage::Failure(stowage::Origin::Binding, 0, std::string("libcudart.so.13 has no ") + symbol);
}

}  // namespace

const Runtime* runtime() {
  return loaded ? &table : nullptr;
}

void check(int err, const std::string& what) {
  if (err == 0) return;
  if (loaded && table.getLastError) table.getLastError();
  const char* message = loaded && table.getErrorString ? table.getErrorString(err) : "unknown error";
  throw stowage::CudaFailure(err, what + ": " + message + " (CUDA error " + std::to_string(err) + ")");
}

namespace {

const Runtime& loadedRuntime() {
  if (!loaded) throw stowage::ArgumentError("the CUDA runtime is not loaded (cudaLoad first)");
  ignoreOtherThreadsCaptures();
  return table;
}

}  // namespace

DeviceScope::DeviceScope(int ordinal, const std::string& what) : ordinal_(ordinal) {
  const Runtime& rt = loadedRuntime();
  if (rt.getDevice(&previous_) != 0) {
    rt.getLastError();
    previous_ = -1;
  }
  if (previous_ != ordinal_) check(rt.setDevice(ordinal_), what);
}

DeviceScope::DeviceScope(int ordinal) noexcept : ordinal_(ordinal) {
  if (!loaded) return;
  if (table.getDevice(&previous_) != 0) previous_ = -1;
  if (previous_ != ordinal_ && table.setDevice(ordinal_) != 0) table.getLastError();
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && previous_ != ordinal_ && table.setDevice(previous_) != 0) table.getLastError();
}

void* deviceAlloc(int ordinal, size_t bytes, const std::string& device) {
  const Runtime& rt = loadedRuntime();
  void* p = nullptr;
  DeviceScope scope(ordinal, "device " + device);
  check(rt.malloc(&p, bytes ? bytes : 1), "device " + device + ": cudaMalloc of " + std::to_string(bytes) + " bytes");
  return p;
}

void deviceFree(int ordinal, void* data) noexcept {
  if (!loaded || !data) return;
  // cudaFree synchronises the device: never while a capture is open on it.
  std::lock_guard<std::recursive_mutex> capture(captureLock(ordinal));
  DeviceScope scope(ordinal);
  table.free(data);
  table.getLastError();  // a failure here has nobody to tell, and must not fail ONNX Runtime's next launch
}

void copyToDevice(int ordinal, void* dst, const void* src, size_t bytes, bool wait, const std::string& what) {
  const Runtime& rt = loadedRuntime();
  DeviceScope scope(ordinal, what);
  // copy: host to GPU (the weight arena's loads, a graph's inputs)
  if (!wait) {
    check(rt.memcpyAsync(dst, src, bytes, kHostToDevice, nullptr), what);
    return;
  }
  check(rt.memcpy(dst, src, bytes, kHostToDevice), what);  // copy: (as above)
  check(rt.streamSynchronize(nullptr), what);
}

void copyToHost(int ordinal, void* dst, const void* src, size_t bytes, const std::string& what) {
  const Runtime& rt = loadedRuntime();
  DeviceScope scope(ordinal, what);  // a CUDA shared-memory region may be on another GPU than the thread's
  check(rt.memcpy(dst, src, bytes, kDeviceToHost), what);  // copy: GPU to host (a graph's outputs)
  check(rt.streamSynchronize(nullptr), what);
}

void copyDevices(int ordinal, void* dst, const void* src, size_t bytes, const std::string& what) {
  const Runtime& rt = loadedRuntime();
  DeviceScope scope(ordinal, what);
  // copy: GPU to GPU (a CUDA shared-memory tensor on another GPU, or out of a region)
  check(rt.memcpy(dst, src, bytes, kDefault), what);
  check(rt.streamSynchronize(nullptr), what);
}

namespace {

// Opened IPC handles by (GPU, handle bytes): the mapping and how many hold it.
std::mutex ipcMutex;
std::map<std::pair<int, std::string>, std::pair<void*, int>> ipcOpened;

}  // namespace

void* ipcOpen(int ordinal, const CudaIpcHandle& handle, const std::string& what) {
  const Runtime& rt = loadedRuntime();
  std::lock_guard<std::recursive_mutex> capture(captureLock(ordinal));
  std::lock_guard<std::mutex> lock(ipcMutex);
  auto key = std::make_pair(ordinal, std::string(handle.reserved, kIpcHandleBytes));
  auto at = ipcOpened.find(key);
  if (at != ipcOpened.end()) {
    at->second.second++;
    return at->second.first;
  }
  DeviceScope scope(ordinal, what);
  void* data = nullptr;
  // Opened on the allocation's own GPU (the caller's `ordinal`), so no peer access is ever enabled.
  // The flag is cudaIpcMemLazyEnablePeerAccess all the same: CUDA's documentation says it must be
  // given, and the driver refuses 0 (cudaErrorInvalidValue: every registration failed so on an H200,
  // 2026-11-28, while CuPy's open with the flag took the same kind of handle). Triton passes it too.
  check(rt.ipcOpenMemHandle(&data, handle, kIpcMemLazyEnablePeerAccess), what + ": cudaIpcOpenMemHandle");
  ipcOpened[key] = {data, 1};
  return data;
}

void ipcClose(int ordinal, void* data) noexcept {
  if (!loaded || !data) return;
  std::lock_guard<std::recursive_mutex> capture(captureLock(ordinal));  // closing synchronises the context
  std::lock_guard<std::mutex> lock(ipcMutex);
  for (auto at = ipcOpened.begin(); at != ipcOpened.end(); ++at) {
    if (at->first.first != ordinal || at->second.first != data) continue;
    if (--at->second.second == 0) {
      DeviceScope scope(ordinal);
      table.ipcCloseMemHandle(data);
      table.getLastError();  // nobody to tell here, and not for the next launch to report
      ipcOpened.erase(at);
    }
    return;
  }
}

namespace {

// A function of the driver API, from the driver's own library (loaded with the runtime's first
// context); null when it is not there.
void* driverFunction(const char* name) noexcept {
  static void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return driver ? dlsym(driver, name) : nullptr;
}

}  // namespace

bool allocationDeviceOf(int ordinal, void* data, int& device, std::string& why) noexcept {
  // cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (9), pointer).
  static auto getAttribute = reinterpret_cast<int (*)(void*, int, unsigned long long)>(driverFunction("cuPointerGetAttribute"));
  device = -1;
  if (!loaded || !getAttribute) {
    why = "the driver's cuPointerGetAttribute (libcuda.so.1) is not available";
    return false;
  }
  int err;
  {
    DeviceScope scope(ordinal);
    err = getAttribute(&device, 9, reinterpret_cast<unsigned long long>(data));
  }
  table.getLastError();
  if (err != 0) {
    why = "cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) failed (CUDA driver error " + std::to_string(err) + ")";
    device = -1;
    return false;
  }
  return true;
}

bool allocationBytesFrom(int ordinal, void* data, size_t& bytes, std::string& why) noexcept {
  static auto getAddressRange = reinterpret_cast<int (*)(unsigned long long*, size_t*, unsigned long long)>(driverFunction("cuMemGetAddressRange_v2"));
  bytes = 0;
  if (!loaded || !getAddressRange) {
    why = "the driver's cuMemGetAddressRange_v2 (libcuda.so.1) is not available";
    return false;
  }
  unsigned long long base = 0;
  size_t size = 0;
  unsigned long long at = reinterpret_cast<unsigned long long>(data);
  int err;
  {
    DeviceScope scope(ordinal);
    err = getAddressRange(&base, &size, at);
  }
  table.getLastError();
  if (err != 0) {
    why = "cuMemGetAddressRange failed (CUDA driver error " + std::to_string(err) + ")";
    return false;
  }
  // `at` inside [base, base + size): at base + size the pointer is past the allocation's end.
  if (at < base || at - base >= size) {
    why = "the handle's address is outside the allocation the driver reports";
    return false;
  }
  bytes = size - static_cast<size_t>(at - base);
  return true;
}

CudaIpcHandle ipcHandle(int ordinal, void* data, const std::string& what) {
  const Runtime& rt = loadedRuntime();
  DeviceScope scope(ordinal, what);
  CudaIpcHandle handle;
  check(rt.ipcGetMemHandle(&handle, data), what + ": cudaIpcGetMemHandle");
  return handle;
}

using stowage::MoveStep;
using stowage::planMove;

// The scratch buffer an overlapping move asks the GPU for first (256 MiB at a 64-byte distance is
// 8 copies with it), and the least it settles for (chooseScratch, move-plan.h).
constexpr size_t kMoveScratchBytes = size_t(64) << 20;
constexpr size_t kLeastMoveScratchBytes = size_t(1) << 20;

void moveWithin(int ordinal, uint8_t* base, size_t to, size_t from, size_t length, const std::string& what) {
  if (length == 0 || to == from) return;
  const Runtime& rt = loadedRuntime();
  // Synchronous copies and a synchronisation of the default stream, a scratch buffer allocated and
  // freed: none of it while a capture is open on this GPU.
  std::lock_guard<std::recursive_mutex> capture(captureLock(ordinal));
  check(rt.setDevice(ordinal), what);
  // A scratch buffer for an overlapping move (move-plan.h), as large as the GPU gives, from
  // kMoveScratchBytes down to a MiB; without one, pieces of the distance moved, as slow as that is.
  const size_t distance = to > from ? to - from : from - to;
  void* scratch = nullptr;
  size_t scratchBytes = 0;
  if (distance < length) {
    scratchBytes = stowage::chooseScratch(length, kMoveScratchBytes, kLeastMoveScratchBytes, [&](size_t want) {
      if (rt.malloc(&scratch, want) == 0) return true;
      rt.getLastError();  // refused: not an error for the next launch to report
      scratch = nullptr;
      return false;
    });
  }
  try {
    planMove(to, from, length, scratchBytes, [&](MoveStep step, size_t dst, size_t src, size_t n) {
      uint8_t* s = static_cast<uint8_t*>(scratch);
      void* d = step == MoveStep::FromScratch || step == MoveStep::Within ? base + dst : s;
      const void* r = step == MoveStep::ToScratch || step == MoveStep::Within ? base + src : s;
      // copy: compaction, within the GPU (counted as the bytes moved)
      check(rt.memcpy(d, r, n, kDeviceToDevice), what);
    });
    check(rt.streamSynchronize(nullptr), what);
  } catch (...) {
    if (scratch) deviceFree(ordinal, scratch);
    throw;
  }
  if (scratch) deviceFree(ordinal, scratch);
}

UploadStream::UploadStream(int ordinal, std::string device) : ordinal_(ordinal), device_(std::move(device)) {
  const Runtime& rt = loadedRuntime();
  check(rt.setDevice(ordinal_), "the upload stream on " + device_);
  // cudaStreamNonBlocking: no implicit ordering with the legacy default stream.
  check(rt.streamCreateWithFlags(&stream_, 1), "cudaStreamCreateWithFlags (the upload stream on " + device_ + ")");
}

UploadStream::~UploadStream() {
  if (!loaded) return;
  table.setDevice(ordinal_);
  // Copies still in flight would write memory that may be freed next.
  if (stream_) table.streamSynchronize(stream_);
  for (auto& [id, g] : groups_) {
    table.eventDestroy(g.start);
    table.eventDestroy(g.end);
  }
  if (open_) table.eventDestroy(open_);
  if (stream_) table.streamDestroy(stream_);
  table.getLastError();  // nobody to tell here, and not for the next launch to report
}

void* UploadStream::event() {
  const Runtime& rt = loadedRuntime();
  void* e = nullptr;
  // cudaEventBlockingSync: a wait for it sleeps the thread instead of spinning a core.
  constexpr unsigned int kBlockingSync = 1;
  check(rt.eventCreateWithFlags(&e, kBlockingSync), "cudaEventCreateWithFlags (the upload stream on " + device_ + ")");
  int err = rt.eventRecord(e, stream_);
  if (err != 0) {
    rt.eventDestroy(e);
    check(err, "cudaEventRecord (the upload stream on " + device_ + ")");
  }
  return e;
}

void UploadStream::copy(void* dst, const void* src, size_t bytes) {
  const Runtime& rt = loadedRuntime();
  check(rt.setDevice(ordinal_), "an upload to " + device_);
  if (!open_) open_ = event();
  // copy: host to GPU beside execution (a cold model's weights, while another model runs)
  check(rt.memcpyAsync(dst, src, bytes, kHostToDevice, stream_), "an upload of " + std::to_string(bytes) + " bytes to " + device_);
}

uint32_t UploadStream::mark() {
  const Runtime& rt = loadedRuntime();
  check(rt.setDevice(ordinal_), "an upload to " + device_);
  void* start = open_ ? open_ : event();
  open_ = nullptr;
  void* end = nullptr;
  try {
    end = event();
  } catch (...) {
    rt.eventDestroy(start);
    throw;
  }
  uint32_t id = next_++;
  groups_[id] = {start, end};
  return id;
}

const UploadStream::Group& UploadStream::group(uint32_t id) const {
  auto at = groups_.find(id);
  if (at == groups_.end()) throw stowage::ArgumentError("upload " + std::to_string(id) + " on " + device_ + " is not in flight (waited for already?)");
  return at->second;
}

double UploadStream::wait(uint32_t id) {
  const Runtime& rt = loadedRuntime();
  Group g = group(id);
  groups_.erase(id);
  float ms = 0;
  int err = rt.eventSynchronize(g.end);
  if (err == 0) err = rt.eventElapsedTime(&ms, g.start, g.end);
  rt.eventDestroy(g.start);
  rt.eventDestroy(g.end);
  check(err, "waiting for an upload to " + device_);
  return ms;
}

void ignoreOtherThreadsCaptures() noexcept {
  // cudaStreamCaptureModeThreadLocal: this thread's own captures only.
  constexpr int kThreadLocal = 1;
  thread_local bool done = false;
  if (done || !loaded || !table.threadExchangeStreamCaptureMode) return;
  int mode = kThreadLocal;
  if (table.threadExchangeStreamCaptureMode(&mode) != 0) {
    table.getLastError();
    return;  // tried again at the thread's next call
  }
  done = true;
}

std::recursive_mutex& captureLock(int ordinal) {
  static std::mutex guard;
  static std::map<int, std::unique_ptr<std::recursive_mutex>> locks;
  std::lock_guard<std::mutex> lock(guard);
  std::unique_ptr<std::recursive_mutex>& at = locks[ordinal];
  if (!at) at = std::make_unique<std::recursive_mutex>();
  return *at;
}

void synchronize(int ordinal, const std::string& what) {
  const Runtime& rt = loadedRuntime();
  DeviceScope scope(ordinal, what);
  check(rt.streamSynchronize(nullptr), what);
}

size_t cudnnVersion() {
  return cudnnGetVersionFn ? cudnnGetVersionFn() : 0;
}

std::vector<std::string> load(const std::vector<std::string>& dirs, std::vector<std::string>& loadedFrom) {
  std::lock_guard<std::mutex> lock(loadMutex);
  // In dependency order, so each finds the ones before it already loaded. cuDNN 9 is a front
  // library that opens its parts by soname at run time: they are loaded here too, so those opens
  // find them whatever the loader's path.
  // Optional ones (the compilers cuDNN's runtime-compiled engines use, cuDNN's parts) are loaded
  // when present; cuDNN reports what it lacks when a model needs it.
  struct Library {
    const char* name;
    bool required;
  };
  static const Library libraries[] = {
    {"libcudart.so.13", true}, {"libcublasLt.so.13", true}, {"libcublas.so.13", true}, {"libcurand.so.10", true},
    {"libcufft.so.12", true}, {"libnvrtc.so.13", false}, {"libnvJitLink.so.13", false},
    {"libcudnn_graph.so.9", false}, {"libcudnn_engines_precompiled.so.9", false}, {"libcudnn_engines_runtime_compiled.so.9", false},
    {"libcudnn_heuristic.so.9", false}, {"libcudnn_ops.so.9", false}, {"libcudnn_cnn.so.9", false}, {"libcudnn_adv.so.9", false},
    {"libcudnn.so.9", true},
  };
  std::vector<std::string> missing;
  for (const Library& library : libraries) {
    const char* name = library.name;
    std::string from, error;
    void* h = open(name, dirs, from, error);
    if (!h) {
      if (library.required) missing.push_back(std::string(name) + " (" + error + ")");
      continue;
    }
    loadedFrom.push_back(from);
    if (std::strcmp(name, "libcudart.so.13") == 0 && !loaded) {
      bind(h, "cudaGetDeviceCount", table.getDeviceCount);
      bind(h, "cudaSetDevice", table.setDevice);
      bind(h, "cudaMalloc", table.malloc);
      bind(h, "cudaFree", table.free);
      bind(h, "cudaMemcpy", table.memcpy);
      bind(h, "cudaMemcpyAsync", table.memcpyAsync);
      bind(h, "cudaGetLastError", table.getLastError);
      bind(h, "cudaStreamSynchronize", table.streamSynchronize);
      bind(h, "cudaMemGetInfo", table.memGetInfo);
      bind(h, "cudaHostRegister", table.hostRegister);
      bind(h, "cudaHostUnregister", table.hostUnregister);
      bind(h, "cudaRuntimeGetVersion", table.runtimeGetVersion);
      bind(h, "cudaDriverGetVersion", table.driverGetVersion);
      bind(h, "cudaDeviceGetPCIBusId", table.deviceGetPCIBusId);
      bind(h, "cudaGetErrorString", table.getErrorString);
      bind(h, "cudaDeviceSynchronize", table.deviceSynchronize);
      bind(h, "cudaStreamCreateWithFlags", table.streamCreateWithFlags);
      bind(h, "cudaStreamDestroy", table.streamDestroy);
      bind(h, "cudaEventCreateWithFlags", table.eventCreateWithFlags);
      bind(h, "cudaGetDevice", table.getDevice);
      bind(h, "cudaEventRecord", table.eventRecord);
      bind(h, "cudaEventQuery", table.eventQuery);
      bind(h, "cudaEventSynchronize", table.eventSynchronize);
      bind(h, "cudaEventElapsedTime", table.eventElapsedTime);
      bind(h, "cudaEventDestroy", table.eventDestroy);
      bind(h, "cudaIpcGetMemHandle", table.ipcGetMemHandle);
      bind(h, "cudaIpcOpenMemHandle", table.ipcOpenMemHandle);
      bind(h, "cudaIpcCloseMemHandle", table.ipcCloseMemHandle);
      // Since CUDA 10.1; optional all the same (without it, captures are only serialised).
      *reinterpret_cast<void**>(&table.threadExchangeStreamCaptureMode) = dlsym(h, "cudaThreadExchangeStreamCaptureMode");
      loaded = true;
    }
    if (std::strcmp(name, "libcudnn.so.9") == 0) {
      cudnnGetVersionFn = reinterpret_cast<size_t (*)()>(dlsym(h, "cudnnGetVersion"));
    }
  }
  return missing;
}

namespace {

// ---------------------------------------------------------------------------------------------
// NVML: the GPUs as the driver describes them (for the start-up log and the nv_gpu_* metrics)

struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlUtilization {
  unsigned int gpu, memory;
};
using NvmlDevice = void*;

struct Nvml {
  int (*init)();
  int (*getHandleByPciBusId)(const char*, NvmlDevice*);
  int (*getName)(NvmlDevice, char*, unsigned int);
  int (*getUuid)(NvmlDevice, char*, unsigned int);
  int (*getMemoryInfo)(NvmlDevice, NvmlMemory*);
  int (*getUtilization)(NvmlDevice, NvmlUtilization*);
  int (*getPowerUsage)(NvmlDevice, unsigned int*);
  int (*getPowerLimit)(NvmlDevice, unsigned int*);
  int (*getEnergy)(NvmlDevice, unsigned long long*);
  int (*driverVersion)(char*, unsigned int);
  int (*cudaDriverVersion)(int*);
  const char* (*errorString)(int);
};

std::mutex nvmlMutex;
Nvml nvml;
bool nvmlReady = false;
std::string nvmlError;

// NVML from the driver (libnvidia-ml.so.1), initialised once; false with nvmlError set when absent.
bool loadNvml() {
  std::lock_guard<std::mutex> lock(nvmlMutex);
  if (nvmlReady) return true;
  if (!nvmlError.empty()) return false;
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    nvmlError = std::string("NVML is not available (libnvidia-ml.so.1 comes with the NVIDIA driver): ") + dlerror();
    return false;
  }
  auto sym = [&](const char* name) {
    void* f = dlsym(h, name);
    if (!f) throw std::runtime_error(std::string("libnvidia-ml.so.1 has no ") + name);
    return f;
  };
  try {
    nvml.init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    nvml.getHandleByPciBusId = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    nvml.getName = reinterpret_cast<int (*)(NvmlDevice, char*, unsigned int)>(sym("nvmlDeviceGetName"));
    nvml.getUuid = reinterpret_cast<int (*)(NvmlDevice, char*, unsigned int)>(sym("nvmlDeviceGetUUID"));
    nvml.getMemoryInfo = reinterpret_cast<int (*)(NvmlDevice, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo"));
    nvml.getUtilization = reinterpret_cast<int (*)(NvmlDevice, NvmlUtilization*)>(sym("nvmlDeviceGetUtilizationRates"));
    nvml.getPowerUsage = reinterpret_cast<int (*)(NvmlDevice, unsigned int*)>(sym("nvmlDeviceGetPowerUsage"));
    nvml.getPowerLimit = reinterpret_cast<int (*)(NvmlDevice, unsigned int*)>(sym("nvmlDeviceGetEnforcedPowerLimit"));
    nvml.getEnergy = reinterpret_cast<int (*)(NvmlDevice, unsigned long long*)>(sym("nvmlDeviceGetTotalEnergyConsumption"));
    nvml.driverVersion = reinterpret_cast<int (*)(char*, unsigned int)>(sym("nvmlSystemGetDriverVersion"));
    nvml.cudaDriverVersion = reinterpret_cast<int (*)(int*)>(sym("nvmlSystemGetCudaDriverVersion_v2"));
    nvml.errorString = reinterpret_cast<const char* (*)(int)>(sym("nvmlErrorString"));
  } catch (const std::exception& err) {
    nvmlError = err.what();
    return false;
  }
  int rc = nvml.init();
  if (rc != 0) {
    nvmlError = std::string("nvmlInit: ") + nvml.errorString(rc);
    return false;
  }
  nvmlReady = true;
  return true;
}

// cudaLoad(dirs: string[]): { loaded: string[], missing: string[] }
Napi::Value CudaLoad(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  std::vector<std::string> dirs;
  if (info.Length() > 0 && info[0].IsArray()) {
    Napi::Array list = info[0].As<Napi::Array>();
    for (uint32_t i = 0; i < list.Length(); i++) if (list.Get(i).IsString()) dirs.push_back(list.Get(i).As<Napi::String>().Utf8Value());
  }
  std::vector<std::string> from;
  std::vector<std::string> missing = load(dirs, from);
  Napi::Object out = Napi::Object::New(e);
  Napi::Array l = Napi::Array::New(e, from.size());
  for (size_t i = 0; i < from.size(); i++) l.Set(i, from[i]);
  Napi::Array m = Napi::Array::New(e, missing.size());
  for (size_t i = 0; i < missing.size(); i++) m.Set(i, missing[i]);
  out.Set("loaded", l);
  out.Set("missing", m);
  return out;
}

// cudaDevices(): the GPUs this process sees (CUDA_VISIBLE_DEVICES applies), by CUDA ordinal, with
// NVML's description where NVML is there. Creates no CUDA context.
Napi::Value CudaDevices(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  const Runtime* rt = &loadedRuntime();
  Napi::Object out = Napi::Object::New(e);
  int count = 0;
  int rc = rt->getDeviceCount(&count);
  if (rc != 0) {
    // No driver or no device: an answer, not a crash; the caller words it.
    out.Set("error", std::string(rt->getErrorString(rc)) + " (CUDA error " + std::to_string(rc) + ")");
    rt->getLastError();
    count = 0;
  }
  int runtimeVersion = 0, driverVersion = 0;
  rt->runtimeGetVersion(&runtimeVersion);
  rt->driverGetVersion(&driverVersion);
  out.Set("runtimeVersion", runtimeVersion);
  out.Set("driverCudaVersion", driverVersion);
  out.Set("cudnnVersion", static_cast<double>(cudnnVersion()));
  bool haveNvml = loadNvml();
  if (haveNvml) {
    char version[96] = {0};
    if (nvml.driverVersion(version, sizeof version) == 0) out.Set("driverVersion", std::string(version));
  } else {
    out.Set("nvmlError", nvmlError);
  }
  Napi::Array devices = Napi::Array::New(e, count);
  for (int i = 0; i < count; i++) {
    Napi::Object d = Napi::Object::New(e);
    d.Set("ordinal", i);
    char bus[64] = {0};
    if (rt->deviceGetPCIBusId(bus, sizeof bus, i) == 0) d.Set("pciBusId", std::string(bus));
    NvmlDevice handle = nullptr;
    if (haveNvml && bus[0] && nvml.getHandleByPciBusId(bus, &handle) == 0) {
      char name[128] = {0}, uuid[96] = {0};
      if (nvml.getName(handle, name, sizeof name) == 0) d.Set("name", std::string(name));
      if (nvml.getUuid(handle, uuid, sizeof uuid) == 0) d.Set("uuid", std::string(uuid));
      NvmlMemory mem;
      if (nvml.getMemoryInfo(handle, &mem) == 0) {
        d.Set("memoryTotalBytes", static_cast<double>(mem.total));
        d.Set("memoryUsedBytes", static_cast<double>(mem.used));
        d.Set("memoryFreeBytes", static_cast<double>(mem.free));
      }
      NvmlUtilization util;
      if (nvml.getUtilization(handle, &util) == 0) d.Set("utilization", util.gpu / 100.0);
      unsigned int mw = 0;
      if (nvml.getPowerUsage(handle, &mw) == 0) d.Set("powerWatts", mw / 1000.0);
      if (nvml.getPowerLimit(handle, &mw) == 0) d.Set("powerLimitWatts", mw / 1000.0);
      unsigned long long mj = 0;
      if (nvml.getEnergy(handle, &mj) == 0) d.Set("energyJoules", static_cast<double>(mj) / 1000.0);
    }
    devices.Set(i, d);
  }
  out.Set("devices", devices);
  return out;
}

// cudaMemoryInfo(ordinal): { freeBytes, totalBytes } as the CUDA runtime counts them on that
// device (makes the calling thread's context there: call it from the device's own thread).
Napi::Value CudaMemoryInfo(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  const Runtime& rt = loadedRuntime();
  if (info.Length() < 1 || !info[0].IsNumber()) throw stowage::ArgumentError("cudaMemoryInfo(ordinal): ordinal must be a number");
  int ordinal = info[0].As<Napi::Number>().Int32Value();
  size_t freeBytes = 0, totalBytes = 0;
  check(rt.setDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")");
  check(rt.memGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo");
  Napi::Object out = Napi::Object::New(e);
  out.Set("freeBytes", static_cast<double>(freeBytes));
  out.Set("totalBytes", static_cast<double>(totalBytes));
  return out;
}

// cudaProbe(ordinal): { error, message }: whether the process's context on that GPU still works,
// after a run failed (a synchronisation of the device: every later call fails the same way once
// the context is poisoned: an illegal address, a launch failure, an ECC error, a GPU off the bus).
// error 0: it works.
Napi::Value CudaProbe(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  const Runtime& rt = loadedRuntime();
  if (info.Length() < 1 || !info[0].IsNumber()) throw stowage::ArgumentError("cudaProbe(ordinal): ordinal must be a number");
  const int ordinal = info[0].As<Napi::Number>().Int32Value();
  // A device synchronisation while another thread captures on this GPU would fail (900) and
  // invalidate that capture: a healthy GPU taken out of service for good.
  std::lock_guard<std::recursive_mutex> capture(captureLock(ordinal));
  int err = rt.setDevice(ordinal);
  if (err == 0) err = rt.deviceSynchronize();
  Napi::Object out = Napi::Object::New(e);
  out.Set("error", err);
  out.Set("message", err == 0 ? "" : rt.getErrorString(err));
  if (err != 0) rt.getLastError();
  return out;
}

// movePlanHost(buffer, to, from, length, scratchBytes): moveWithin's plan (move-plan.h) run over a
// host buffer with memcpy, for the tests that hold it to memmove without a GPU; answers the number
// of copies it made.
Napi::Value MovePlanHost(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  const char* call = "movePlanHost(buffer, to, from, length, scratchBytes)";
  if (info.Length() < 5) throw stowage::ArgumentError(call);
  stowage::Bytes bytes = stowage::bytesOf(info[0], call);
  size_t args[4];
  for (int i = 0; i < 4; i++) {
    if (!info[i + 1].IsNumber() || info[i + 1].As<Napi::Number>().DoubleValue() < 0) throw stowage::ArgumentError(call);
    args[i] = static_cast<size_t>(info[i + 1].As<Napi::Number>().DoubleValue());
  }
  const size_t to = args[0], from = args[1], length = args[2], scratchBytes = args[3];
  if (to > bytes.length || from > bytes.length || length > bytes.length - to || length > bytes.length - from) throw stowage::ArgumentError(call);
  std::vector<uint8_t> scratch(scratchBytes);
  size_t copies = planMove(to, from, length, scratchBytes, [&](MoveStep step, size_t dst, size_t src, size_t n) {
    uint8_t* d = step == MoveStep::ToScratch ? scratch.data() : bytes.data + dst;
    const uint8_t* r = step == MoveStep::FromScratch ? scratch.data() : bytes.data + src;
    std::memcpy(d, r, n);  // copy: (the tests' stand-in for compaction's copies on a GPU)
  });
  return Napi::Number::New(e, static_cast<double>(copies));
}

// scratchChoiceHost(length, most, least, largestGiven): moveWithin's choice of scratch buffer
// (chooseScratch, move-plan.h) against a device that gives at most `largestGiven` bytes at once,
// for the tests: { got, asked } (the sizes asked, in order).
Napi::Value ScratchChoiceHost(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  const char* call = "scratchChoiceHost(length, most, least, largestGiven)";
  if (info.Length() < 4) throw stowage::ArgumentError(call);
  size_t args[4];
  for (int i = 0; i < 4; i++) {
    if (!info[i].IsNumber() || info[i].As<Napi::Number>().DoubleValue() < 0) throw stowage::ArgumentError(call);
    args[i] = static_cast<size_t>(info[i].As<Napi::Number>().DoubleValue());
  }
  std::vector<size_t> asked;
  const size_t got = stowage::chooseScratch(args[0], args[1], args[2], [&](size_t want) {
    asked.push_back(want);
    return want <= args[3];
  });
  Napi::Array list = Napi::Array::New(e, asked.size());
  for (size_t i = 0; i < asked.size(); i++) list.Set(i, static_cast<double>(asked[i]));
  Napi::Object out = Napi::Object::New(e);
  out.Set("got", static_cast<double>(got));
  out.Set("asked", list);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Pinned host memory

// Registrations by start address, counted: several device threads pin the same shared buffer
// (the process's host weights), and CUDA registers a range once per process.
std::mutex pinMutex;
std::map<void*, std::pair<size_t, int>> pins;

// pinHost(buffer): the buffer's pages locked and registered with CUDA (cudaHostRegister), so
// copies from it run at the bus's speed without a staging copy. The object keeps the buffer alive;
// release() (or collection) unregisters it once no other pin of the same range remains.
class PinnedHost : public Napi::ObjectWrap<PinnedHost> {
 public:
  static Napi::Function Define(Napi::Env e) {
    return DefineClass(e, "PinnedHost", {
      InstanceAccessor("bytes", &PinnedHost::Bytes, nullptr),
      InstanceMethod("release", &PinnedHost::Release),
    });
  }

  explicit PinnedHost(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PinnedHost>(info) {
    stowage::entry(info.Env(), [&] { pin(info); });
  }

  ~PinnedHost() override { unpin(); }

 private:
  void pin(const Napi::CallbackInfo& info) {
    // The same checks as every buffer the binding takes: a detached one is refused, not pinned at 0 bytes.
    stowage::Bytes host = stowage::bytesOf(info.Length() > 0 ? info[0] : info.Env().Undefined(), "pinHost(buffer)");
    const Runtime& rt = loadedRuntime();
    if (host.length == 0) return;  // nothing to register
    std::lock_guard<std::mutex> lock(pinMutex);
    auto at = pins.find(host.data);
    if (at != pins.end()) {
      if (at->second.first < host.length) throw stowage::ArgumentError("pinHost: the buffer's start is pinned already with a shorter length");
      at->second.second++;
    } else {
      check(rt.hostRegister(host.data, host.length, 1 /* cudaHostRegisterPortable: every device's context */), "cudaHostRegister of " + std::to_string(host.length) + " bytes");
      pins[host.data] = {host.length, 1};
    }
    data_ = host.data;
    bytes_ = host.length;
    keep_ = Napi::Persistent(host.holder);
  }

  void unpin() {
    if (!data_ || bytes_ == 0) return;
    std::lock_guard<std::mutex> lock(pinMutex);
    auto at = pins.find(data_);
    if (at != pins.end() && --at->second.second == 0) {
      // A failure here has nobody to tell: it must not stay CUDA's last error, for the next kernel
      // launch on this thread to report as its own.
      if (const Runtime* rt = runtime(); rt && rt->hostUnregister(data_) != 0) rt->getLastError();
      pins.erase(at);
    }
    data_ = nullptr;
    if (!keep_.IsEmpty()) keep_.Reset();
  }

  Napi::Value Bytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), data_ ? static_cast<double>(bytes_) : 0);
  }

  Napi::Value Release(const Napi::CallbackInfo& info) {
    unpin();
    return info.Env().Undefined();
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Napi::ObjectReference keep_;
};

}  // namespace

void define(Napi::Env e, Napi::Object exports) {
  exports.Set("cudaLoad", Napi::Function::New(e, stowage::entered<CudaLoad>));
  exports.Set("cudaDevices", Napi::Function::New(e, stowage::entered<CudaDevices>));
  exports.Set("cudaMemoryInfo", Napi::Function::New(e, stowage::entered<CudaMemoryInfo>));
  exports.Set("PinnedHost", PinnedHost::Define(e));
  exports.Set("movePlanHost", Napi::Function::New(e, stowage::entered<MovePlanHost>));
  exports.Set("scratchChoiceHost", Napi::Function::New(e, stowage::entered<ScratchChoiceHost>));
  exports.Set("cudaProbe", Napi::Function::New(e, stowage::entered<CudaProbe>));
}

}  // namespace stowage_cuda

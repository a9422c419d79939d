// The CUDA runtime, NVML and cuDNN as the binding uses them: loaded at run time (dlopen), never
// linked, so the binding builds and runs on a machine with no GPU and no CUDA toolkit. Only the
// calls Stowage makes are declared, with the C ABI the libraries export (CUDA 13, NVML, cuDNN 9).
// Everything the binding does with CUDA is here: loading it, describing the GPUs, pinned host
// memory, and device memory with its copies (ort.cc binds tensors over that memory; it makes no
// CUDA call of its own). Failures throw stowage::CudaFailure with CUDA's error number.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace stowage_cuda {

// cudaMemcpyKind
constexpr int kHostToDevice = 1;
constexpr int kDeviceToHost = 2;
constexpr int kDeviceToDevice = 3;
constexpr int kDefault = 4;  // inferred from the pointers (unified addressing): across GPUs too

// cudaIpcOpenMemHandle's flag cudaIpcMemLazyEnablePeerAccess, the one it takes.
constexpr unsigned int kIpcMemLazyEnablePeerAccess = 1;

// cudaIpcMemHandle_t: 64 opaque bytes, passed by value.
constexpr size_t kIpcHandleBytes = 64;
struct CudaIpcHandle {
  char reserved[kIpcHandleBytes];
};

struct Runtime {
  int (*getDeviceCount)(int*);
  int (*setDevice)(int);
  int (*malloc)(void**, size_t);
  int (*free)(void*);
  int (*memcpy)(void*, const void*, size_t, int);
  int (*memcpyAsync)(void*, const void*, size_t, int, void*);
  int (*getLastError)();
  int (*streamSynchronize)(void*);
  int (*memGetInfo)(size_t*, size_t*);
  int (*hostRegister)(void*, size_t, unsigned int);
  int (*hostUnregister)(void*);
  int (*runtimeGetVersion)(int*);
  int (*driverGetVersion)(int*);
  int (*deviceGetPCIBusId)(char*, int, int);
  const char* (*getErrorString)(int);
  int (*threadExchangeStreamCaptureMode)(int*);
  int (*deviceSynchronize)();
  int (*streamCreateWithFlags)(void**, unsigned int);
  int (*streamDestroy)(void*);
  int (*eventCreateWithFlags)(void**, unsigned int);
  int (*getDevice)(int*);
  int (*eventRecord)(void*, void*);
  int (*eventQuery)(void*);
  int (*eventSynchronize)(void*);
  int (*eventElapsedTime)(float*, void*, void*);
  int (*eventDestroy)(void*);
  int (*ipcGetMemHandle)(void*, void*);
  int (*ipcOpenMemHandle)(void**, CudaIpcHandle, unsigned int);
  int (*ipcCloseMemHandle)(void*);
};

// The runtime, or null until load() succeeded.
const Runtime* runtime();

// Load the CUDA libraries the CUDA execution provider needs (cudart, cuBLAS/cuBLASLt, cuRAND,
// cuFFT, cuDNN 9 and its parts) from `dirs` (first match wins) or the loader's own path, with
// RTLD_GLOBAL: the provider then finds them by their sonames without LD_LIBRARY_PATH. Answers the
// libraries it could not load (empty when all loaded); idempotent.
std::vector<std::string> load(const std::vector<std::string>& dirs, std::vector<std::string>& loadedFrom);

// Throws stowage::CudaFailure(err, "<what>: <CUDA's message> (CUDA error <err>)") when `err` is not
// cudaSuccess, after clearing the thread's last error: ONNX Runtime's CUDA kernels check
// cudaGetLastError() after each launch, and would fail on ours.
void check(int err, const std::string& what);

// Device memory on GPU `ordinal` (cudaMalloc; at least a byte, so that an empty block still has an
// address of its own). `device` names it in messages ("cuda:0").
void* deviceAlloc(int ordinal, size_t bytes, const std::string& device);
// Frees what deviceAlloc gave; never throws (it runs in destructors).
void deviceFree(int ordinal, void* data) noexcept;
// Host -> device. From pinned memory this runs at the bus's speed. The copy goes on the legacy
// default stream, which ONNX Runtime's kernels (on a stream of their own) do not wait for, so it is
// waited for before returning, unless `wait` is false: then the caller calls synchronize() after
// its last copy and keeps `src` alive and unchanged until then.
void copyToDevice(int ordinal, void* dst, const void* src, size_t bytes, bool wait, const std::string& what);
// Device -> host, waited for.
void copyToHost(int ordinal, void* dst, const void* src, size_t bytes, const std::string& what);
// [from, from + length) to [to, to + length) within one allocation, overlapping ranges allowed.
void moveWithin(int ordinal, uint8_t* base, size_t to, size_t from, size_t length, const std::string& what);
// Device -> device, on one GPU or across two (cudaMemcpyDefault), waited for.
void copyDevices(int ordinal, void* dst, const void* src, size_t bytes, const std::string& what);
// CUDA IPC (Triton's CUDA shared memory): another process's allocation, opened on GPU `ordinal`,
// the GPU the allocation is on (as Triton opens it: no peer access is needed, which PCIe machines
// without P2P lack; a run on another GPU copies across). A handle is opened once per GPU in the
// process and counted: device actors share the mapping, and CUDA allows one per context. ipcClose
// gives one back; the last closes it.
void* ipcOpen(int ordinal, const CudaIpcHandle& handle, const std::string& what);
void ipcClose(int ordinal, void* data) noexcept;
// Bytes from `data` to the end of the allocation holding it (the driver's cuMemGetAddressRange):
// what a CUDA shared-memory region's declared size is checked against. False, with why, when the
// driver cannot say (the region is then taken at the client's byte size, as Triton takes it, and
// the why is said as a warning).
bool allocationBytesFrom(int ordinal, void* data, size_t& bytes, std::string& why) noexcept;
// The CUDA ordinal of the GPU whose memory `data` is (the driver's CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL),
// asked in `ordinal`'s context: false, saying why, when the driver cannot tell.
bool allocationDeviceOf(int ordinal, void* data, int& device, std::string& why) noexcept;
// The handle another process opens `data` (the start of a cudaMalloc'd block of this process) with.
CudaIpcHandle ipcHandle(int ordinal, void* data, const std::string& what);
// Every copy issued on the default stream without waiting has landed.
void synchronize(int ordinal, const std::string& what);

// Host -> device copies on a stream of their own (non-blocking: it orders against neither the
// legacy default stream nor ONNX Runtime's), so a cold model's weights copy while the device runs
// another model's batch (the weight cache's uploads beside execution). Copies are grouped: mark()
// closes the group issued since the last mark, and answers its id; wait() waits for it and answers
// how long its copies took on the GPU (between events recorded before its first copy and after its
// last). Sources must stay alive and unchanged until their group has been waited for; pinned, the
// copies run at the bus's speed and the host does not wait for them.
class UploadStream {
 public:
  UploadStream(int ordinal, std::string device);
  ~UploadStream();
  UploadStream(const UploadStream&) = delete;
  UploadStream& operator=(const UploadStream&) = delete;
  void copy(void* dst, const void* src, size_t bytes);
  uint32_t mark();
  double wait(uint32_t id);

 private:
  struct Group {
    void* start;
    void* end;
  };
  void* event();
  const Group& group(uint32_t id) const;
  int ordinal_;
  std::string device_;
  void* stream_ = nullptr;
  void* open_ = nullptr;  // the event before the open group's first copy
  uint32_t next_ = 1;
  std::map<uint32_t, Group> groups_;
};

// The calling thread ignores CUDA graph captures other threads have open (cudaStreamCaptureMode
// ThreadLocal), once per thread; a no-op until the runtime is loaded. ONNX Runtime begins its
// captures in the global mode, in which any thread left in the default mode is refused
// "potentially unsafe" calls (cudaMalloc, cudaFree, cudaHostRegister, a synchronising copy, a
// session's creation) while any capture is open in the process, failing them (error 900) and
// invalidating the capture (901). Every thread that touches CUDA through the binding calls this
// first: the device threads, the main thread, the libuv threads runs go on.
void ignoreOtherThreadsCaptures() noexcept;

// One lock per GPU, held by a run that may capture a CUDA graph (its graph's first runs): two
// captures on one GPU, from two device actors' threads, would refuse each other's calls. Held too
// around everything that synchronises the GPU's device or context, which CUDA forbids while a
// capture is open on it (error 900, and the capture invalidated): a CUDA session's creation and
// release (the CUDA provider synchronises the device), the probe of a GPU after a failed run,
// device frees, compaction's moves, opening and closing IPC handles. Recursive: a free made while
// the lock is held (compaction's scratch) takes it again.
std::recursive_mutex& captureLock(int ordinal);

// The calling thread's current device set to `ordinal` for the scope, and set back after: a copy
// or an IPC handle on another GPU than the thread's own leaves the thread where it was.
class DeviceScope {
 public:
  // Throws CUDA's failure to set the device, naming `what`.
  DeviceScope(int ordinal, const std::string& what);
  // For cleanup paths that have nobody to tell (frees, closes): a failure is cleared, not thrown.
  explicit DeviceScope(int ordinal) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int ordinal_;
};

// cuDNN's version (e.g. 91900 for 9.19.0), or 0 when cuDNN is not loaded.
size_t cudnnVersion();

// Adds cudaLoad, cudaDevices, cudaMemoryInfo and PinnedHost to the binding's exports.
void define(Napi::Env e, Napi::Object exports);

}  // namespace stowage_cuda

// The binding's errors: each failure carries where it came from and that origin's own number, and
// is turned into a JavaScript error in one place (`entry`), so TypeScript decides by numbers and
// never by reading a message.
//
// A JavaScript error from the binding has:
//   code         a string, as before: ONNX Runtime's code name (ORT_FAIL, ...), ERR_CUDA,
//                ERR_OUT_OF_MEMORY, ERR_ORT_ARGUMENT (refused before ONNX Runtime or CUDA saw it)
//                or ERR_ORT_BINDING (anything else)
//   origin       'onnxruntime' | 'cuda' | 'allocator' | 'argument' | 'binding'
//   ortCode      ONNX Runtime's OrtErrorCode (a number), when ONNX Runtime answered the failure
//   cudaError    the CUDA runtime's error number: of a call the binding made, or the one ONNX
//                Runtime's CUDA provider reports in its status ("CUDA failure 2: ...")
//   library      with cudaError or libraryStatus: which CUDA library failed (CUDA, CUBLAS, CUDNN, ...)
//   libraryStatus that library's status number, when ONNX Runtime reports a CUDA library's failure
//   outOfMemory  true when the failure is memory running out: cudaErrorMemoryAllocation (2), a
//                CUDA library's *_ALLOC_FAILED (cuDNN 9: *_ALLOCATION_FAILED), an allocation refused
//                (std::bad_alloc), or ONNX Runtime's allocator refusing a buffer
//   memory       with outOfMemory, which memory ran out: 'gpu' (a CUDA error or library status
//                that says so, or ONNX Runtime's message naming cudaMalloc or CUDA), 'host'
//                (std::bad_alloc, the binding's own CPU allocation), or 'arena': ONNX Runtime's
//                arena refused a buffer, and its words do not say whether that arena is over a
//                GPU's memory or the host's (the same message for both): the caller, who knows
//                the session's device, decides
#pragma once

#include <napi.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace stowage {

enum class Origin { OnnxRuntime, Cuda, Allocator, Argument, Binding };

// cudaErrorMemoryAllocation: the one CUDA runtime error that means the device has no room.
constexpr int kCudaErrorMemoryAllocation = 2;

struct Failure : std::runtime_error {
  Origin origin;
  // The origin's own number: OrtErrorCode or cudaError_t (0 for the others).
  int number = 0;
  // A CUDA library's failure carried in ONNX Runtime's message ("" when none).
  std::string library;
  int libraryStatus = 0;
  bool outOfMemory = false;
  // With outOfMemory: "gpu", "host" or "arena" (see above).
  std::string memory;
  Failure(Origin o, int n, const std::string& message) : std::runtime_error(message), origin(o), number(n) {}
};

// A refusal of the caller's arguments, before ONNX Runtime or CUDA sees them.
struct ArgumentError : Failure {
  explicit ArgumentError(const std::string& message) : Failure(Origin::Argument, 0, message) {}
};

// ONNX Runtime's status (code and message); a CUDA library's failure reported in the message is
// read into library/libraryStatus (and the CUDA error number, for the runtime's own).
struct OrtFailure : Failure {
  OrtFailure(int ortCode, const std::string& message);
};

// Memory refused to the binding itself (ONNX Runtime's CPU allocator, operator new).
struct AllocationFailure : Failure {
  explicit AllocationFailure(const std::string& message) : Failure(Origin::Allocator, 0, message) {
    outOfMemory = true;
    memory = "host";
  }
};

// A CUDA runtime call the binding made returned `error`.
struct CudaFailure : Failure {
  CudaFailure(int error, const std::string& message) : Failure(Origin::Cuda, error, message) {
    outOfMemory = error == kCudaErrorMemoryAllocation;
    if (outOfMemory) memory = "gpu";
  }
};

// `err` as the JavaScript error described above.
Napi::Error toJs(Napi::Env e, const std::exception& err);

// Every function JavaScript calls runs its body through this: a C++ failure becomes the JavaScript
// error above; one JavaScript raised already (a getter that threw) passes through as it is.
template <typename F>
auto entry(Napi::Env e, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw toJs(e, AllocationFailure("out of host memory (std::bad_alloc)"));
  } catch (const std::exception& err) {
    throw toJs(e, err);
  }
}

// A function JavaScript calls, its body run through `entry`: Napi::Function::New(e, entered<F>).
template <Napi::Value (*F)(const Napi::CallbackInfo&)>
Napi::Value entered(const Napi::CallbackInfo& info) {
  return entry(info.Env(), [&] { return F(info); });
}

}  // namespace stowage

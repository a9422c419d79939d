// The binding's failures to JavaScript errors (failure.h says what an error carries).
#include "failure.h"

#include <cctype>
#include <cstring>

namespace stowage {
namespace {

// ONNX Runtime's OrtErrorCode names, by number (onnxruntime_c_api.h's enum, in its order).
const char* const kOrtCodeNames[] = {
  "ORT_OK", "ORT_FAIL", "ORT_INVALID_ARGUMENT", "ORT_NO_SUCHFILE", "ORT_NO_MODEL", "ORT_ENGINE_ERROR",
  "ORT_RUNTIME_EXCEPTION", "ORT_INVALID_PROTOBUF", "ORT_MODEL_LOADED", "ORT_NOT_IMPLEMENTED",
  "ORT_INVALID_GRAPH", "ORT_EP_FAIL", "ORT_MODEL_LOAD_CANCELED", "ORT_MODEL_REQUIRES_COMPILATION", "ORT_NOT_FOUND",
};

const char* ortCodeName(int code) {
  if (code >= 0 && code < static_cast<int>(sizeof kOrtCodeNames / sizeof *kOrtCodeNames)) return kOrtCodeNames[code];
  return "ORT_ERROR";
}

const char* originName(Origin o) {
  switch (o) {
    case Origin::OnnxRuntime: return "onnxruntime";
    case Origin::Cuda: return "cuda";
    case Origin::Allocator: return "allocator";
    case Origin::Argument: return "argument";
    case Origin::Binding: return "binding";
  }
  return "binding";
}

// ONNX Runtime's CUDA provider reports a CUDA library's failure as "<LIBRARY> failure <status>:
// <name or text>; GPU=...; expr=..." (its CudaCall), inside whatever status carries it (a kernel's
// "Non-zero status code returned while running Conv node ..."). Answers the library and status,
// and that status's text up to the next ';'.
bool libraryFailure(const std::string& message, std::string& library, int& status, std::string& text) {
  static const char kFailure[] = " failure ";
  for (size_t at = message.find(kFailure); at != std::string::npos; at = message.find(kFailure, at + 1)) {
    size_t start = at;
    while (start > 0 && (std::isupper(static_cast<unsigned char>(message[start - 1])) || message[start - 1] == '_')) start--;
    size_t digits = at + sizeof kFailure - 1;
    size_t end = digits;
    while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) end++;
    if (start == at || end == digits || end - digits > 9 || end >= message.size() || message[end] != ':') continue;
    library = message.substr(start, at - start);
    status = std::stoi(message.substr(digits, end - digits));
    size_t stop = message.find(';', end);
    text = message.substr(end + 1, stop == std::string::npos ? std::string::npos : stop - end - 1);
    return true;
  }
  return false;
}

// ONNX Runtime's own allocators (the CPU's, and the arena over any device's memory) refuse a buffer
// with these fixed words: there is no OrtErrorCode for it.
bool ortAllocatorRefused(const std::string& message) {
  return message.find("Failed to allocate memory for requested buffer of size") != std::string::npos ||
         message.find("is smaller than requested bytes of") != std::string::npos;
}

}  // namespace

OrtFailure::OrtFailure(int ortCode, const std::string& message) : Failure(Origin::OnnxRuntime, ortCode, message) {
  std::string text;
  int status = 0;
  if (libraryFailure(message, library, status, text)) {
    libraryStatus = status;
    // CUDA's runtime numbers its errors; the libraries (cuBLAS, cuDNN, ...) name theirs
    // *_ALLOC_FAILED, and cuDNN 9 tells the GPU's (..._DEVICE_ALLOCATION_FAILED) from the host's
    // (..._HOST_ALLOCATION_FAILED).
    if (text.find("HOST_ALLOCATION_FAILED") != std::string::npos) {
      outOfMemory = true;
      memory = "host";
    } else if ((library == "CUDA" && status == kCudaErrorMemoryAllocation) || text.find("_ALLOC_FAILED") != std::string::npos ||
               text.find("DEVICE_ALLOCATION_FAILED") != std::string::npos) {
      outOfMemory = true;
      memory = "gpu";
    }
  }
  if (!outOfMemory && ortAllocatorRefused(message)) {
    outOfMemory = true;
    // The arena's words are the same over a GPU's memory and the host's; a failed cudaMalloc it
    // reports, or CUDA named beside it, says which.
    memory = message.find("cudaMalloc") != std::string::npos || message.find("CUDA") != std::string::npos ? "gpu" : "arena";
  }
  if (!outOfMemory && (message.find("bad_alloc") != std::string::npos || message.find("bad allocation") != std::string::npos)) {
    outOfMemory = true;
    memory = "host";
  }
}

Napi::Error toJs(Napi::Env e, const std::exception& err) {
  Napi::Error js = Napi::Error::New(e, err.what());
  const Failure* failure = dynamic_cast<const Failure*>(&err);
  Origin origin = failure ? failure->origin : Origin::Binding;
  const char* code = "ERR_ORT_BINDING";
  switch (origin) {
    case Origin::OnnxRuntime: code = ortCodeName(failure->number); break;
    case Origin::Cuda: code = "ERR_CUDA"; break;
    case Origin::Allocator: code = "ERR_OUT_OF_MEMORY"; break;
    case Origin::Argument: code = "ERR_ORT_ARGUMENT"; break;
    case Origin::Binding: break;
  }
  js.Set("code", Napi::String::New(e, code));
  js.Set("origin", Napi::String::New(e, originName(origin)));
  js.Set("outOfMemory", Napi::Boolean::New(e, failure && failure->outOfMemory));
  if (failure && failure->outOfMemory) js.Set("memory", Napi::String::New(e, failure->memory));
  if (!failure) return js;
  if (origin == Origin::OnnxRuntime) js.Set("ortCode", Napi::Number::New(e, failure->number));
  if (origin == Origin::Cuda) {
    js.Set("cudaError", Napi::Number::New(e, failure->number));
    js.Set("library", Napi::String::New(e, "CUDA"));
  }
  if (!failure->library.empty()) {
    js.Set("library", Napi::String::New(e, failure->library));
    js.Set("libraryStatus", Napi::Number::New(e, failure->libraryStatus));
    if (failure->library == "CUDA") js.Set("cudaError", Napi::Number::New(e, failure->libraryStatus));
  }
  return js;
}

}  // namespace stowage

// POSIX shared memory for Triton's system-shared-memory extension: open an object by key, map a
// byte range of it, and hand JavaScript an external ArrayBuffer over the mapping. Node has no
// mmap of its own; this is the whole addon.
//
// Lifetimes: the main thread opens the object when a region is registered and keeps the
// descriptor while the region is registered or a request uses it, so the object outlives its
// creator's unlink. A device thread maps from that descriptor; each mapping belongs to its
// ArrayBuffer and is unmapped by the finalizer when the ArrayBuffer is garbage-collected, so no
// view can outlive its memory.
#include <napi.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

struct Mapping {
  void* base;      // what mmap returned (page-aligned)
  size_t length;   // what was mapped
};

std::string ErrnoText(int err) { return std::string(std::strerror(err)); }

// A key names a POSIX shared-memory object: "/" then a name without further "/", as shm_open
// requires; nothing else, so no key resolves outside the shared-memory filesystem. A NUL would
// cut the name short for shm_open: the object opened would not be the one the client named.
bool ValidKey(const std::string& key) {
  if (key.size() < 2 || key.size() > 255 || key[0] != '/') return false;
  if (key.find('/', 1) != std::string::npos || key.find('\0') != std::string::npos) return false;
  return key != "/." && key != "/..";
}

Napi::Value Fail(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  err.ThrowAsJavaScriptException();
  return env.Undefined();
}

// open(key: string): { fd: number, size: number }
// Opens the object read-write. The descriptor keeps the object alive (even if its creator unlinks
// it) until close(fd); mappings made from it outlive the descriptor.
Napi::Value Open(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) return Fail(env, "EARGS", "open(key: string)");
  const std::string key = info[0].As<Napi::String>().Utf8Value();
  if (!ValidKey(key)) {
    return Fail(env, "EINVALKEY", "shared-memory key is not a POSIX shared-memory name: one leading '/', then 1 to 254 characters without '/' or NUL");
  }
  // shm_open opens with O_NOFOLLOW: a symbolic link fails with ELOOP; a directory with EISDIR or EINVAL.
  const int fd = shm_open(key.c_str(), O_RDWR | O_NONBLOCK, 0);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP || err == EISDIR || err == EINVAL) {
      return Fail(env, "ENOTREG", "shm_open(\"" + key + "\"): " + ErrnoText(err) + "; a region must be a shared-memory object, not a link or a directory");
    }
    return Fail(env, err == ENOENT ? "ENOENT" : "EOPEN", "shm_open(\"" + key + "\"): " + ErrnoText(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Fail(env, "EOPEN", "fstat(\"" + key + "\"): " + ErrnoText(err));
  }
  // A FIFO or device node in the shared-memory filesystem is not memory: mapping or reading it could block or fault.
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return Fail(env, "ENOTREG", "\"" + key + "\" is not a regular shared-memory object (a FIFO, socket or device node)");
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("fd", Napi::Number::New(env, fd));
  result.Set("size", Napi::Number::New(env, static_cast<double>(st.st_size)));
  return result;
}

// map(fd: number, offset: number, byteSize: number): ArrayBuffer over [offset, offset + byteSize)
// of the object, read-write, unmapped when the ArrayBuffer is garbage-collected.
Napi::Value Map(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) {
    return Fail(env, "EARGS", "map(fd: number, offset: number, byteSize: number)");
  }
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const double offsetArg = info[1].As<Napi::Number>().DoubleValue();
  const double sizeArg = info[2].As<Napi::Number>().DoubleValue();
  if (!(offsetArg >= 0) || !(sizeArg > 0) || offsetArg > 9007199254740991.0 || sizeArg > 9007199254740991.0) {
    return Fail(env, "EARGS", "offset must be >= 0 and byte_size > 0");
  }
  const size_t offset = static_cast<size_t>(offsetArg);
  const size_t byteSize = static_cast<size_t>(sizeArg);
  struct stat st;
  if (fstat(fd, &st) != 0) return Fail(env, "EMAP", "fstat: " + ErrnoText(errno));
  const size_t objectSize = static_cast<size_t>(st.st_size);
  if (offset > objectSize || byteSize > objectSize - offset) {
    return Fail(env, "ETOOSMALL", "the shared-memory object holds " + std::to_string(objectSize) + " bytes, fewer than offset " +
                std::to_string(offset) + " + byte_size " + std::to_string(byteSize));
  }
  // mmap offsets must be page-aligned: map from the page that holds `offset`.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t alignedOffset = offset - offset % page;
  const size_t delta = offset - alignedOffset;
  const size_t length = byteSize + delta;
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(alignedOffset));
  if (base == MAP_FAILED) return Fail(env, "EMAP", "mmap: " + ErrnoText(errno));
  auto* mapping = new Mapping{base, length};
  return Napi::ArrayBuffer::New(
      env, static_cast<char*>(base) + delta, byteSize,
      [](Napi::Env, void*, Mapping* m) {
        munmap(m->base, m->length);
        delete m;
      },
      mapping);
}

// close(fd: number): void
Napi::Value Close(const Napi::CallbackInfo& info) {
  if (info.Length() >= 1 && info[0].IsNumber()) close(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("open", Napi::Function::New(env, Open, "open"));
  exports.Set("map", Napi::Function::New(env, Map, "map"));
  exports.Set("close", Napi::Function::New(env, Close, "close"));
  return exports;
}

}  // namespace

NODE_API_MODULE(stowage_shm, Init)

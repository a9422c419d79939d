{
  "targets": [
    {
      "target_name": "stowage_shm",
      "sources": ["shm.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NAPI_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-Wall", "-Wextra"],
      "cflags_cc!": ["-fno-exceptions"],
      "libraries": ["-lrt"]
    },
    {
      "target_name": "stowage_ort",
      "sources": ["ort.cc", "cuda.cc", "failure.cc", "buffers.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "ort-include"],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NAPI_CPP_EXCEPTIONS"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
      "libraries": ["-ldl"]
    }
  ]
}

"""Install what backend cuda needs, from PyPI, in one command (npm run cuda:install):

- ONNX Runtime's CUDA provider of exactly onnxruntime-node's version (the wheel onnxruntime-gpu==V):
  libonnxruntime_providers_cuda.so and libonnxruntime_providers_shared.so, placed beside
  onnxruntime-node's libonnxruntime.so.1, where ONNX Runtime looks for them;
- the CUDA 13 libraries the provider loads (NVIDIA's wheels: cudart, cuBLAS/cuBLASLt, cuRAND, cuFFT,
  NVRTC, nvJitLink, cuDNN 9), their shared libraries into .stowage/cuda/lib, where the server loads
  them by path (src/native/cuda.ts): no LD_LIBRARY_PATH to set.

Then it checks what it placed (the provider's version, CUDA 13, cuDNN 9) and writes
.stowage/cuda/versions.json. The NVIDIA driver (>= 580, for CUDA 13) is the machine's; the server
says at start when it is missing or too old.

  python3 tools/install-cuda.py [--wheel-dir DIR] [--keep-wheels] [--ort-dir DIR] [--lib-dir DIR] [--provider-only]

--wheel-dir: install from wheels already downloaded there (a machine without registries), instead
of downloading them. --ort-dir, --lib-dir: other places than onnxruntime-node's library folder and
.stowage/cuda/lib (the server then needs STOWAGE_CUDA_LIBRARY_PATH=that lib dir). --provider-only: the provider's two
libraries alone (one 247 MB wheel instead of 1.5 GB), for a machine whose CUDA 13 and cuDNN 9
libraries come from elsewhere: its CUDA installation or NVIDIA's wheels in a Python environment
(STOWAGE_CUDA_LIBRARY_PATH; bench/gpu-check.sh finds the latter itself), or for packing the provider
with tools/pack-offline.sh. Needs only Python 3 and pip.
"""
import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
ORT_NODE = ROOT / "node_modules" / "onnxruntime-node"
ORT_DIR = ORT_NODE / "bin" / "napi-v6" / "linux" / "x64"
LIB_DIR = ROOT / ".stowage" / "cuda" / "lib"
PROVIDER_LIBRARIES = ["libonnxruntime_providers_cuda.so", "libonnxruntime_providers_shared.so"]
# The provider's own requirements (onnxruntime-gpu's `cuda` and `cudnn` extras) and cuBLAS, which
# it links but does not name. nvJitLink: cuDNN's runtime-compiled engines.
CUDA_WHEELS = [
    "nvidia-cuda-runtime~=13.0",
    "nvidia-cublas~=13.0",
    "nvidia-curand~=10.0",
    "nvidia-cufft~=12.0",
    "nvidia-cuda-nvrtc~=13.0",
    "nvidia-nvjitlink~=13.0",
    "nvidia-cudnn-cu13~=9.0",
]
# What the provider and cuDNN open: every one must be there after the install.
REQUIRED = ["libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10", "libcufft.so.12", "libcudnn.so.9"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def fail(message):
    print(f"cuda:install: {message}", file=sys.stderr)
    sys.exit(1)


def ort_version():
    # onnxruntime-node's package.json sits three folders above its library folder.
    try:
        return json.loads((ORT_DIR.parents[3] / "package.json").read_text())["version"]
    except (OSError, KeyError, ValueError) as err:
        fail(f"cannot read onnxruntime-node's version ({err}); run npm install first")


def download(wheels, into):
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp", "-d", str(into)]
    for p in PLATFORMS:
        command += ["--platform", p]
    print(f"cuda:install: downloading {' '.join(wheels)}", flush=True)
    if subprocess.run(command + wheels).returncode != 0:
        fail("pip could not download the wheels above (is PyPI reachable? else use --wheel-dir with wheels fetched elsewhere)")


def wheel_version(path):
    # name-version-...whl
    return path.name.split("-")[1]


def find_wheel(directory, prefix):
    found = sorted(pathlib.Path(directory).glob(f"{prefix}-*.whl"))
    return found[-1] if found else None


def main():
    parser = argparse.ArgumentParser(description="Install ONNX Runtime's CUDA provider and the CUDA 13 libraries for backend cuda.")
    parser.add_argument("--wheel-dir", help="install from the wheels in this directory instead of downloading them")
    parser.add_argument("--keep-wheels", action="store_true", help="keep the downloaded wheels in .stowage/cuda/wheels")
    parser.add_argument("--ort-dir", help="where libonnxruntime.so.1 is (default: onnxruntime-node's)")
    parser.add_argument("--lib-dir", help="where the CUDA libraries go (default: .stowage/cuda/lib)")
    parser.add_argument("--provider-only", action="store_true",
                        help="only the provider's two libraries: the CUDA libraries come from the machine (STOWAGE_CUDA_LIBRARY_PATH)")
    args = parser.parse_args()
    global ORT_DIR, LIB_DIR
    if args.ort_dir:
        ORT_DIR = pathlib.Path(args.ort_dir)
    if args.lib_dir:
        LIB_DIR = pathlib.Path(args.lib_dir)
    if not ORT_DIR.joinpath("libonnxruntime.so.1").exists():
        fail(f"{ORT_DIR}/libonnxruntime.so.1 is missing; run npm install first (linux x64 only)")
    version = ort_version()

    temp = tempfile.mkdtemp(prefix="stowage-cuda-")
    try:
        if args.wheel_dir:
            wheels = pathlib.Path(args.wheel_dir)
        else:
            wheels = ROOT / ".stowage" / "cuda" / "wheels" if args.keep_wheels else pathlib.Path(temp)
            wheels.mkdir(parents=True, exist_ok=True)
            download([f"onnxruntime-gpu=={version}"] + ([] if args.provider_only else CUDA_WHEELS), wheels)

        provider = find_wheel(wheels, "onnxruntime_gpu")
        if provider is None:
            fail(f"no onnxruntime_gpu wheel in {wheels}")
        if wheel_version(provider) != version:
            fail(f"{provider.name} is ONNX Runtime {wheel_version(provider)}, but onnxruntime-node is {version}: the provider must be the same version")
        with zipfile.ZipFile(provider) as z:
            for name in PROVIDER_LIBRARIES:
                member = f"onnxruntime/capi/{name}"
                if member not in z.namelist():
                    fail(f"{provider.name} has no {member}")
                with z.open(member) as src, open(ORT_DIR / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        if args.provider_only:
            print(f"cuda:install: the CUDA provider of ONNX Runtime {version} is beside {ORT_DIR}/libonnxruntime.so.1 (provider only:")
            print("cuda:install: CUDA 13 and cuDNN 9 must come from the machine; STOWAGE_CUDA_LIBRARY_PATH names their folders)")
            return

        if LIB_DIR.exists():
            shutil.rmtree(LIB_DIR)
        LIB_DIR.mkdir(parents=True)
        versions = {"onnxruntime": version}
        for requirement in CUDA_WHEELS:
            name = re.split(r"[~=<>]", requirement)[0]
            wheel = find_wheel(wheels, name.replace("-", "_"))
            if wheel is None:
                fail(f"no {name} wheel in {wheels}")
            versions[name] = wheel_version(wheel)
            with zipfile.ZipFile(wheel) as z:
                for member in z.namelist():
                    # The shared libraries only (nvidia/<part>/lib/lib*.so*): no headers, no static archives.
                    if re.match(r"^nvidia/[^/]+/lib/lib[^/]+\.so(\.[0-9.]+)?$", member):
                        with z.open(member) as src, open(LIB_DIR / pathlib.PurePosixPath(member).name, "wb") as dst:
                            shutil.copyfileobj(src, dst)

        missing = [lib for lib in REQUIRED if not (LIB_DIR / lib).exists()]
        if missing:
            fail(f"after unpacking, {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing from {LIB_DIR}: the wheels above do not carry CUDA 13 / cuDNN 9")
        if not versions["nvidia-cudnn-cu13"].startswith("9."):
            fail(f"cuDNN {versions['nvidia-cudnn-cu13']} is not cuDNN 9")
        if not versions["nvidia-cuda-runtime"].startswith("13."):
            fail(f"the CUDA runtime {versions['nvidia-cuda-runtime']} is not CUDA 13")
        (LIB_DIR.parent / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
        print(f"cuda:install: the CUDA provider of ONNX Runtime {version} is beside {ORT_DIR}/libonnxruntime.so.1;")
        print(f"cuda:install: {len(list(LIB_DIR.iterdir()))} CUDA libraries in {LIB_DIR} ({', '.join(f'{k} {v}' for k, v in versions.items())})")
        print("cuda:install: set global.runtime.backend: cuda in the node file (the NVIDIA driver must be 580 or newer)")
    finally:
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()

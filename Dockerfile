# Stowage: one container per machine. Build:  docker build -t stowage .
# Run:    docker run --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 -v /path/to/models:/models:ro stowage
#
# The CUDA variant:  docker build --build-arg CUDA=1 -t stowage:cuda .  then run it with the NVIDIA
# container runtime (docker run --gpus all ...): the build runs npm run cuda:install
# (tools/install-cuda.py: ONNX Runtime's CUDA provider of onnxruntime-node's exact version and the
# CUDA 13 libraries, from PyPI) and sets the image's node file to backend: cuda. The host needs the
# NVIDIA driver 580 or newer; nothing else CUDA is in the image beyond what the script placed.
# The default, CUDA=0, is the CPU build, which the tests build and run with podman
# (test/container): NODE_IMAGE names the base, a local stand-in for node:24-bookworm-slim there
# (tools/container/make-base-image.sh), since no container registry is reachable.
ARG NODE_IMAGE=node:24-bookworm-slim

# --- build: compile the TypeScript and the native addons (shared memory, the ONNX Runtime binding) ---
# The binding compiles against ONNX Runtime's C API headers, fetched by src/native/ort-header.mjs
# from the Go module proxy that GOPROXY names (pass --build-arg GOPROXY="$(go env GOPROXY)"), unless
# the build context already holds them in src/native/ort-include/ (an earlier `npm install` there).
FROM ${NODE_IMAGE} AS build
ARG CUDA=0
ARG GOPROXY=""
ENV GOPROXY=${GOPROXY}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ make python3 \
 && if [ "$CUDA" = "1" ]; then apt-get install -y --no-install-recommends python3-pip; fi \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json ./
COPY src/ src/
COPY tools/install-cuda.py tools/
# onnxruntime-node's own install script would fetch CUDA 12 libraries from a server outside the
# registries: skipped; the CUDA variant gets its provider from PyPI instead.
RUN export ONNXRUNTIME_NODE_INSTALL=skip \
 && npm ci --no-audit --no-fund \
 && npm prune --omit=dev \
 && mkdir -p .stowage/cuda \
 && if [ "$CUDA" = "1" ]; then python3 tools/install-cuda.py; fi

# --- runtime: the built server, no compiler, the image's non-root user "node" (uid 1000) ---
FROM ${NODE_IMAGE}
ARG CUDA=0
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules/ node_modules/
COPY --from=build /app/.stowage/ .stowage/
COPY --from=build /app/dist/ dist/
COPY --from=build /app/src/native/build/Release/stowage_shm.node /app/src/native/build/Release/stowage_ort.node src/native/build/Release/
COPY package.json main.js ./
COPY proto/ proto/
COPY bundles/ /models/
COPY docker/node.yaml /etc/stowage/node.yaml
RUN if [ "$CUDA" = "1" ]; then sed -i 's/^    backend: cpu$/    backend: cuda/' /etc/stowage/node.yaml; fi
# The compile cache (cache_dir): owned by the user the server runs as; mount a volume to keep it.
RUN mkdir -p /var/cache/stowage && chown 1000:1000 /var/cache/stowage
USER 1000:1000
EXPOSE 8000 8001 8002
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8002/readyz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "main.js"]
CMD ["/etc/stowage/node.yaml"]

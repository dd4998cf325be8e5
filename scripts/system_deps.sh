#!/usr/bin/env bash
# System packages some tests use: pdflatex + booktabs (the report tables must compile), Debian's
# Slurm (the SLURM launcher tests), Docker's engine and debootstrap (agent trials in containers: the base image
# is made locally, see scripts/docker_engine.sh). Installed with apt when running as root; elsewhere the tests
# that need them are skipped (CI=true makes a missing SLURM cluster a failure instead).
set -euo pipefail
need=()
command -v pdflatex >/dev/null || need+=(texlive-latex-base texlive-latex-recommended)
command -v slurmctld >/dev/null || need+=(slurmctld slurmd slurm-client munge)
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "system_deps: not root or no apt-get; tests needing ${need[*]} will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

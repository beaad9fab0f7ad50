#!/usr/bin/env bash
# Fills .deps/ (git-ignored) with what the GPU machine lacks for the CUDA
# build, copied from this machine's Debian packages: the headers of fmt
# (libfmt-dev), nlohmann-json (nlohmann-json3-dev) and CLI11 (libcli11-dev)
# into .deps/include/, and GoogleTest's sources (googletest, pulled in by
# libgtest-dev) into .deps/googletest/. CMake takes them from there when
# find_package finds no installed copy (CMakeLists.txt, KASCADE_DEPS_DIR);
# fmt is then used header-only. Run from anywhere; safe to run again.
# Carry .deps to the GPU machine with the working tree; see
# bench/cuda/run_device.sh.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly DEPS=.deps
readonly INCLUDE=/usr/include
readonly GTEST=/usr/src/googletest/googletest

die() { echo "prepare_device_deps: $*" >&2; exit 1; }

for dir in fmt nlohmann CLI; do
  [[ -d $INCLUDE/$dir ]] || die "$INCLUDE/$dir missing (install libfmt-dev, nlohmann-json3-dev, libcli11-dev)"
done
[[ -f $GTEST/CMakeLists.txt ]] || die "$GTEST missing (install googletest or libgtest-dev)"

rm -rf "$DEPS/include" "$DEPS/googletest"
mkdir -p "$DEPS/include" "$DEPS/googletest"
# -L: copies, should a package ever link a header elsewhere. Timestamps
# kept: a second run leaves the builds that use .deps/ up to date.
for dir in fmt nlohmann CLI; do
  cp -rL --preserve=timestamps "$INCLUDE/$dir" "$DEPS/include/"
done
# What building the libraries needs; not gtest's own tests and samples.
for part in CMakeLists.txt cmake include src; do
  cp -rL --preserve=timestamps "$GTEST/$part" "$DEPS/googletest/"
done
echo "prepare_device_deps: $(du -sh "$DEPS" | cut -f1) in $DEPS (fmt, nlohmann, CLI headers; googletest sources)"

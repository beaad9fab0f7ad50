#!/usr/bin/env bash
# llama.cpp's source for the side-by-side GPU benchmark (bench/gpu/run_device.sh
# llama): the llama-cpp-python sdist from PyPI (its vendor/llama.cpp), trimmed
# to what llama-bench with the CPU and CUDA backends builds from (~5 MB
# compressed), so that it travels to the GPU machine, which has no network.
# Nothing of llama.cpp is committed here.
#
#   bench/gpu/fetch_llama_cpp.sh [OUT.tgz]     (default: build-ship/llama-src.tgz)
#
# LLAMA_CPP_PYTHON_VERSION  the sdist (default 0.3.36: llama.cpp 0c1e570, the
#                           build issue 32's table was measured with).
set -euo pipefail
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
out=$(realpath -m "${1:-build-ship/llama-src.tgz}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download "llama-cpp-python==$version" --no-deps --no-binary :all: -d "$work" -q
tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
src=$work/llama_cpp_python-$version/vendor/llama.cpp
dst=$work/llama.cpp
mkdir -p "$dst/ggml/src" "$dst/tools"
cp -r "$src"/{CMakeLists.txt,LICENSE,cmake,src,include,common,vendor} "$dst/"
cp -r "$src"/ggml/{CMakeLists.txt,cmake,include} "$dst/ggml/"
find "$src/ggml/src" -maxdepth 1 -type f -exec cp {} "$dst/ggml/src/" \;
cp -r "$src"/ggml/src/{ggml-cpu,ggml-cuda} "$dst/ggml/src/"
cp -r "$src/tools/llama-bench" "$dst/tools/"
# Only llama-bench among the tools.
printf 'llama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' >"$dst/tools/CMakeLists.txt"
mkdir -p "$(dirname "$out")"
tar czf "$out" -C "$work" llama.cpp
echo "$out: $(du -h "$out" | cut -f1)"

#!/usr/bin/env bash
# Build llama.cpp's llama-bench for this machine, once, for bench/real_shapes.py.
# Usage: bash bench/llama_bench_build.sh   (about 10 minutes on 2 cores; runs at nice 19)
# Source: the llama.cpp that llama-cpp-python 0.3.36's sdist vendors (downloaded by pip).
# SIMD flags are set explicitly from /proc/cpuinfo with GGML_NATIVE=OFF: a -DGGML_NATIVE=ON
# build segfaulted on its first decode on an AVX-512 Xeon. Output:
# ~/.cache/lexguide/llama-bench-build/bin/llama-bench, where bench/real_shapes.py looks.
set -euo pipefail
version=0.3.36
root=${LEXGUIDE_CACHE:-$HOME/.cache/lexguide}
src_dir=$root/llama-src
out=$root/llama-bench-build
mkdir -p "$src_dir"
if [ ! -d "$src_dir/llama_cpp_python-$version" ]; then
  nice -n 19 python -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
    "llama-cpp-python==$version" -d "$src_dir"
  tar xzf "$src_dir/llama_cpp_python-$version.tar.gz" -C "$src_dir"
fi
flags=(-DGGML_NATIVE=OFF)
has() { grep -qw "$1" /proc/cpuinfo; }
has avx && flags+=(-DGGML_AVX=ON)
has avx2 && flags+=(-DGGML_AVX2=ON)
has fma && flags+=(-DGGML_FMA=ON)
has f16c && flags+=(-DGGML_F16C=ON)
has bmi2 && flags+=(-DGGML_BMI2=ON)
has avx512f && flags+=(-DGGML_AVX512=ON)
has avx512vbmi && flags+=(-DGGML_AVX512_VBMI=ON)
has avx512_vnni && flags+=(-DGGML_AVX512_VNNI=ON)
has avx512_bf16 && flags+=(-DGGML_AVX512_BF16=ON)
nice -n 19 cmake -S "$src_dir/llama_cpp_python-$version/vendor/llama.cpp" -B "$out" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release "${flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF
nice -n 19 cmake --build "$out" --target llama-bench -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
echo "built $out/bin/llama-bench"

#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with its CUDA or Vulkan backend on the GPU machine (no network), for
# bench_peers.py's --llama-bench / --llama-vulkan columns. Inputs, made on a machine with network:
#   .gpu-peer/llama-src.tgz  llama.cpp's source (as vendored by the llama-cpp-python sdist)
#   .gpu-peer/vk-tools.tgz   glslc, Vulkan and SPIR-V headers (benches/llama_vulkan_tools.sh), Vulkan only
# Usage (project root): bash benches/build_llama.sh cuda|vulkan JOBS
#   -> /tmp/lc-KIND/llama.cpp/build/bin/llama-bench; logs and the build time under $OUT (or /tmp).
# A failed build leaves a stub llama-bench that prints the first errors and fails, so a bench waiting
# for the binary stops at once.
set -u
OUT=${OUT:-/tmp}
kind=$1; jobs=$2; root=$PWD
mkdir -p /tmp/lc-$kind && tar xzf $root/.gpu-peer/llama-src.tgz -C /tmp/lc-$kind
cd /tmp/lc-$kind/llama.cpp
common="-G Ninja -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release"
start=$SECONDS
if [ $kind = vulkan ]; then
  # Debian 12's 1.3.239 headers lack VK_EXT_layer_settings, used only to configure the validation layer
  python3 - <<'PY'
from pathlib import Path
p = Path("ggml/src/ggml-vulkan/ggml-vulkan.cpp")
s = p.read_text()
a = s.index("    VkBool32 enable_best_practice = layer_settings;")
b = s.index("&layer_setting_info);", a) + len("&layer_setting_info);")
s = s[:a] + "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);" + s[b:]
p.write_text(s)
PY
  mkdir -p /tmp/vk && tar xzf $root/.gpu-peer/vk-tools.tgz -C /tmp/vk && T=/tmp/vk/usr
  export PATH=$T/bin:$PATH LD_LIBRARY_PATH=$T/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  cmake -S . -B build $common -DGGML_VULKAN=ON -DCMAKE_PREFIX_PATH=$T -DVulkan_INCLUDE_DIR=$T/include \
    -DVulkan_LIBRARY=$T/lib/x86_64-linux-gnu/libvulkan.so -DVulkan_GLSLC_EXECUTABLE=$T/bin/glslc > $OUT/$kind-cmake.log 2>&1
else
  PATH=/usr/local/cuda/bin:$PATH cmake -S . -B build $common -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/$kind-cmake.log 2>&1
fi
PATH=/usr/local/cuda/bin:$PATH cmake --build build --target llama-bench -j $jobs > $OUT/$kind-build.log 2>&1
rc=$?
echo "$kind build rc=$rc in $((SECONDS-start)) s" | tee $OUT/$kind-build-time.txt
if [ $rc != 0 ]; then  # a stub, so a bench waiting for the binary fails at once
  grep -m3 "error" $OUT/$kind-build.log > /tmp/lc-$kind/why.txt
  mkdir -p build/bin && printf '#!/bin/sh\ncat /tmp/lc-%s/why.txt >&2; exit 1\n' $kind > build/bin/llama-bench && chmod +x build/bin/llama-bench
fi

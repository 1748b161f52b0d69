#!/usr/bin/env bash
# Brings what llama.cpp's Vulkan backend needs to build on a GPU machine without network access:
# Debian's glslc (shaderc) and its library, the Vulkan headers and loader, SPIR-V headers.
# Writes .gpu-peer/vk-tools.tgz (about 4 MB); the packages come from this machine's apt sources.
#
# Usage (project root):  bash benches/llama_vulkan_tools.sh
# On the GPU machine, beside .gpu-peer/llama-src.tgz (llama.cpp's source):
#   bash benches/build_llama.sh vulkan 16     (builds llama-bench under /tmp/lc-vulkan)
# Debian 12's glslc (2023.2) lacks GL_KHR_cooperative_matrix and GL_EXT_integer_dot_product, so
# that build has neither the cooperative-matrix nor the integer-dot shaders (cmake says so).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p .gpu-peer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
packages=(glslc libshaderc1 libvulkan-dev libvulkan1 spirv-headers)
( cd "$tmp" && { apt-get download "${packages[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && apt-get download "${packages[@]}" >/dev/null; }; } )
for f in "$tmp"/*.deb; do dpkg-deb -x "$f" "$tmp/x"; done
lib="$tmp/x/usr/lib/x86_64-linux-gnu"
# the dev package's libvulkan.so is a link to the loader: make it the loader itself
rm -f "$lib/libvulkan.so" && cp -L "$lib/libvulkan.so.1" "$lib/libvulkan.so"
tar czf .gpu-peer/vk-tools.tgz -C "$tmp/x" usr
ls -la .gpu-peer/vk-tools.tgz

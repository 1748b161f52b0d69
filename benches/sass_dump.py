"""What NVIDIA's driver made of rlxpy's kernels: register count and instruction mix of each compiled
pipeline, read from the driver's shader disk cache (NVIDIA GPUs on Linux; needs ``nvdisasm`` from the
CUDA toolkit and the ``zstandard`` package).

The driver caches every compiled pipeline under ``__GL_SHADER_DISK_CACHE_PATH`` (Vulkan too). An entry
is a set of zstd frames; the frames of compiled code start with ``NVDANVVMNVuc`` and hold the SASS as
16-byte Hopper instructions, from an ``S2R`` to the ``BRA`` to itself that ends a kernel, the word before
the code giving the register count. This script runs a command with the cache pointed at an empty
directory, then disassembles each kernel with ``nvdisasm -b SM90`` and prints, per kernel: registers,
instructions, the most common opcodes, and for the longest loop its size and FFMA/FMUL share (the
issue-slot bound of a GEMM's K loop). benches/RESULTS.md, "the GEMM core's instruction stream", is what
it was made for.

    python3 benches/sass_dump.py --out sass -- python3 benches/bench_gemm.py --shapes 2048x2048x2048 \
        --variants
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
CODE_MAGIC = b"NVDANVVMNVuc"
S2R = b"\x19\x79"  # the low bytes of S2R, a kernel's first instruction
SELF_LOOP = bytes.fromhex("4779fc00fcffffff")  # BRA to itself: the end of a kernel
FFMA, EXIT = 0x223, 0x94D


def frames(data: bytes) -> list[bytes]:
    """Every zstd frame of a cache file, decompressed (what follows a frame's end is ignored)."""
    import zstandard  # benches only: not a dependency of rlxpy

    out = []
    at = data.find(ZSTD_MAGIC)
    while at >= 0:
        try:
            out.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[at:]))
        except zstandard.ZstdError:
            pass
        at = data.find(ZSTD_MAGIC, at + 1)
    return out


def kernels(blob: bytes) -> list[tuple[int, bytes]]:
    """(registers, code) of the kernel in a compiled-code frame: on the 16-byte grid where FFMAs or
    EXITs line up, from the first S2R to the last self-branch."""
    if not blob.startswith(CODE_MAGIC):
        return []
    for offset in range(16):
        grid = range(offset, len(blob) - 16, 16)
        ops = [struct.unpack_from("<H", blob, at)[0] & 0xFFF for at in grid]
        if ops.count(FFMA) + ops.count(EXIT) < 2:
            continue
        starts = [at for at in grid if blob[at:at + 2] == S2R]
        ends = [at for at in grid if blob[at:at + 8] == SELF_LOOP]
        if starts and ends:
            start, end = starts[0], ends[-1] + 16
            return [(blob[start - 16], blob[start:end])]
    return []


def disassemble(code: bytes, path: Path) -> list[tuple[int, str]]:
    """(address, instruction) of raw SM90 code, through nvdisasm."""
    path.write_bytes(code)
    run = subprocess.run(["nvdisasm", "-b", "SM90", str(path)], capture_output=True, text=True, check=True)
    text = run.stdout
    path.with_suffix(".sass").write_text(text)
    return [(int(m.group(1), 16), m.group(2).strip())
            for m in re.finditer(r"/\*([0-9a-f]+)\*/\s+(.*?);", text)]


def opcode(instruction: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0].split(".")[0]


def summary(registers: int, listing: list[tuple[int, str]]) -> str:
    mix = collections.Counter(opcode(ins) for _, ins in listing)
    line = f"{registers} registers, {len(listing)} instructions: " + ", ".join(
        f"{name} {count}" for name, count in mix.most_common(8))
    loops = [(int(m.group(1), 16), at) for at, ins in listing
             if (m := re.search(r"BRA (?:`\(\.L_x_\d+\) )?0x([0-9a-f]+)", ins)) and int(m.group(1), 16) < at]
    if loops:
        top, bottom = max(loops, key=lambda span: span[1] - span[0])
        body = [ins for at, ins in listing if top <= at <= bottom]
        fma = sum(opcode(ins) in ("FFMA", "FMUL") for ins in body)
        line += f"; longest loop {len(body)} instructions, {fma / len(body):.0%} FFMA/FMUL"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="sass", help="where the raw code and .sass listings go")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": cache,
               "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1"}
        if command:
            subprocess.run(command, env=env, check=True)
        found = 0
        for entry in sorted(Path(cache).rglob("*.bin")):
            for blob in frames(entry.read_bytes()):
                for registers, code in kernels(blob):
                    listing = disassemble(code, out / f"kernel{found}.bin")
                    print(f"kernel{found}: {summary(registers, listing)}", flush=True)
                    found += 1
    if not found:
        sys.exit("no compiled kernels in the shader cache (an NVIDIA GPU and its Vulkan driver needed)")


if __name__ == "__main__":
    main()

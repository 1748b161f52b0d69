"""Every RLX_* environment flag, declared once with its type, default and doc.

Flags are parsed at import. Call sites read ``env.DISPATCH_REPORT`` like an int; tests change
flags with ``with env.override(RLX_WGPU_MAX_BINDING=1 << 20): ...``. A bad value raises EnvError
naming the flag; an unknown RLX_* variable gets a warning with the closest known name.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlxpy.errors import EnvError


@dataclass
class Flag:
    name: str
    kind: Callable[[str], Any]
    default: Any
    doc: str
    value: Any = None

    def parse(self, text: str | None) -> Any:
        if text is None or text == "":
            return self.default
        try:
            if self.kind is bool:
                if text.lower() in ("1", "true", "yes", "on"):
                    return True
                if text.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(text)
            return self.kind(text)
        except ValueError:
            raise EnvError(f"{self.name}={text!r}: expected {self.kind.__name__} ({self.doc})") from None

    # Flags compare and format like their values, so call sites stay one line.
    def __int__(self) -> int:
        return int(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __eq__(self, other: object) -> bool:
        return self.value == (other.value if isinstance(other, Flag) else other)

    def __ge__(self, other: Any) -> bool:
        return self.value >= other

    def __gt__(self, other: Any) -> bool:
        return self.value > other

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return str(self.value)


FLAGS: dict[str, Flag] = {}


def flag(name: str, kind: Callable[[str], Any], default: Any, doc: str) -> Flag:
    entry = Flag(name, kind, default, doc)
    entry.value = entry.parse(os.environ.get(name))
    FLAGS[name] = entry
    return entry


DISPATCH_REPORT = flag(
    "RLX_DISPATCH_REPORT",
    int,
    0,
    "print the schedule report: 1 summary line, 2 one line per step, 3 + each kernel's WGSL",
)
WGPU_SCHEDULE = flag("RLX_WGPU_SCHEDULE", int, 0, "alias of RLX_DISPATCH_REPORT (an older name)")
NAN_TRACE = flag(
    "RLX_WGPU_NAN_TRACE",
    int,
    0,
    "after each run: print the first nodes whose output has NaN/Inf (generate stops at the first)",
)
DUMP_NODES = flag(
    "RLX_WGPU_DUMP_NODES", int, 0, "after each run: print max|x| of every node the run computed"
)
DUMP_NODES_LIMIT = flag("RLX_WGPU_DUMP_NODES_LIMIT", int, 64, "how many nodes RLX_WGPU_DUMP_NODES prints")
DUMP_FLAT = flag("RLX_WGPU_DUMP_FLAT", int, 0, "node dumps also print the first 8 values of each node")
BENCH_DISPATCH_ONLY = flag("RLX_BENCH_DISPATCH_ONLY", int, 0, "skip output readback (time dispatch only)")
FORCE_INPUT_UPLOAD = flag(
    "RLX_WGPU_FORCE_INPUT_UPLOAD", int, 0, "upload every input on every run (no unchanged-input skip)"
)
MATMUL_F32_ONLY = flag(
    "RLX_WGPU_MATMUL_F32_ONLY",
    int,
    0,
    "never store matmul weights as f16 (the f16 shadow); a weight too big for one binding then fails",
)
F16_WEIGHTS = flag(
    "RLX_WGPU_F16_WEIGHTS",
    int,
    0,
    "store every f32 matmul weight as f16 (the f16 shadow; automatic for a weight over one binding)",
)
NO_PACKED_BSHD_ATTN = flag(
    "RLX_WGPU_NO_PACKED_BSHD_ATTN",
    int,
    0,
    "disable the packed BSHD attention pattern (attention reading q/k/v in place from a fused QKV)",
)
NO_PATTERNS = flag(
    "RLX_WGPU_NO_PATTERNS", int, 0, "disable every pattern fusion (decode GEMVs and transformer patterns)"
)
SKIP_PATTERNS = flag(
    "RLX_WGPU_SKIP_PATTERNS",
    str,
    "",
    "comma-separated patterns to skip: decode, conv_epilogue, split_qkv, packed_attention, residual_norm",
)
MAX_BINDING = flag(
    "RLX_WGPU_MAX_BINDING", int, 0, "cap the storage binding size rlxpy plans for (bytes; 0 = device)"
)
PROFILE = flag(
    "RLX_WGPU_PROFILE",
    int,
    0,
    "after each run: GPU time by kernel and by layer (timestamp queries); 2 also one line per step",
)
TRACE = flag(
    "RLX_WGPU_TRACE", str, "", "profile each run and write a Chrome trace-event JSON (Perfetto) to this path"
)
ADAPTER = flag("RLX_WGPU_ADAPTER", str, "", "pick an adapter whose name or backend contains this text")
KERNEL_VARIANT = flag(
    "RLX_WGPU_KERNELS",
    str,
    "auto",
    "kernel variants: auto (by adapter type), gpu (workgroup-cooperative), cpu (one invocation per row)",
)
CHECKED_SHADERS = flag(
    "RLX_WGPU_CHECKED_SHADERS", int, 0,
    "compile every kernel with WGSL's runtime bounds checks (audited GEMM and attention kernels skip them)",
)
RAW_ENCODE = flag(
    "RLX_WGPU_RAW_ENCODE", int, 1, "encode dispatches through raw wgpu-native calls (0 = wrappers)"
)


def report_level() -> int:
    return max(int(DISPATCH_REPORT), int(WGPU_SCHEDULE))


def run_debug_flags() -> list[str]:
    """The names of the run-time debug flags that are on (each run is then explained)."""
    return [f.name for f in (NAN_TRACE, DUMP_NODES, PROFILE, TRACE) if f.value]


@dataclass
class RunFlags:
    """The flags a run reads, copied from the environment when an executable is built
    (``WgpuExecutable.flags``), so a run never reads the environment. Setting a flag later affects
    the executables built after it; one executable's copy changes with ``exe.flags.override(...)``
    (or by assigning a field)."""

    nan_trace: int = 0  # RLX_WGPU_NAN_TRACE
    dump_nodes: int = 0  # RLX_WGPU_DUMP_NODES
    dump_nodes_limit: int = 64  # RLX_WGPU_DUMP_NODES_LIMIT
    dump_flat: int = 0  # RLX_WGPU_DUMP_FLAT
    profile: int = 0  # RLX_WGPU_PROFILE
    trace: str = ""  # RLX_WGPU_TRACE
    dispatch_only: int = 0  # RLX_BENCH_DISPATCH_ONLY
    force_input_upload: int = 0  # RLX_WGPU_FORCE_INPUT_UPLOAD

    @staticmethod
    def from_env() -> RunFlags:
        """The flags as they are set now."""
        return RunFlags(int(NAN_TRACE), int(DUMP_NODES), int(DUMP_NODES_LIMIT), int(DUMP_FLAT),
                        int(PROFILE), str(TRACE), int(BENCH_DISPATCH_ONLY), int(FORCE_INPUT_UPLOAD))

    def debug(self) -> list[str]:
        """The names of the run-time debug flags that are on (each run is then explained)."""
        on = ((NAN_TRACE, self.nan_trace), (DUMP_NODES, self.dump_nodes), (PROFILE, self.profile),
              (TRACE, self.trace))
        return [f.name for f, value in on if value]

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        """Temporarily change these flags by field name (``exe.flags.override(dispatch_only=1)``)."""
        old = {}
        for name, value in values.items():
            if not hasattr(self, name):
                raise EnvError(f"unknown run flag {name}")
            old[name] = getattr(self, name)
            setattr(self, name, value)
        try:
            yield
        finally:
            for name, value in old.items():
                setattr(self, name, value)


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Temporarily set flags by their variable names (tests)."""
    old = {}
    for name, value in values.items():
        if name not in FLAGS:
            raise EnvError(f"unknown flag {name}")
        old[name] = FLAGS[name].value
        FLAGS[name].value = value
    try:
        yield
    finally:
        for name, value in old.items():
            FLAGS[name].value = value


def describe() -> str:
    width = max(len(n) for n in FLAGS)
    return "\n".join(f"{f.name:<{width}}  {str(f.value):<8} {f.doc}" for f in FLAGS.values())


def _warn_unknown() -> None:
    for name in os.environ:
        if name.startswith("RLX_") and name not in FLAGS:
            close = difflib.get_close_matches(name, FLAGS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            warnings.warn(f"unknown rlxpy flag {name}{hint}", stacklevel=2)


_warn_unknown()

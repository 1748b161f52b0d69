"""The process-wide wgpu adapter/device, its limits and features, and the pipeline cache.

All arena bindings use one bind-group layout: binding 0 = a read_write storage window of the
arena, binding 1 = the step's uniform record; both with dynamic offsets, so one bind group serves every step.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from rlxpy import env
from rlxpy.errors import DeviceLostError, KernelError, UnsupportedOpError

WANTED_FEATURES = ("shader-f16", "subgroup", "timestamp-query", "timestamp-query-inside-passes")


def wgpu_module() -> Any:
    """The wgpu package, imported on first use: loading wgpu-native is slow, and the pure modules
    (the planner in arena.py, lowering) and the CLI's help must not need it."""
    import wgpu  # deferred: loading wgpu-native is slow and the pure modules must not need it

    return wgpu


def unchecked_module(device: Any, label: str, source: str) -> Any:
    """A shader module of WGSL ``source`` compiled without runtime checks: no clamp of array indices
    and no loop bounding (wgpu-native's wgpuDeviceCreateShaderModuleTrusted, which wgpu-py does not
    wrap). On an H100 the f32 GEMM's K loop then issues ~5% fewer instructions and runs 7% faster
    (benches/RESULTS.md, "the GEMM core's instruction stream"). The caller validates the WGSL first
    through the checked path: this call reports no errors of its own."""
    from wgpu.backends.wgpu_native import GPUShaderModule, ffi, lib  # deferred, as wgpu_module()

    code, name = source.encode(), label.encode()
    kept = ffi.new("char[]", code), ffi.new("char[]", name)  # alive until wgpu-native has copied them
    wgsl = ffi.new("WGPUShaderSourceWGSL *")
    wgsl.chain.sType = lib.WGPUSType_ShaderSourceWGSL
    wgsl.code.data, wgsl.code.length = kept[0], len(code)
    descriptor = ffi.new("WGPUShaderModuleDescriptor *")
    descriptor.nextInChain = ffi.cast("WGPUChainedStruct *", wgsl)
    descriptor.label.data, descriptor.label.length = kept[1], len(name)
    no_checks = 0  # WGPUShaderRuntimeChecks_None
    handle = lib.wgpuDeviceCreateShaderModuleTrusted(device._internal, descriptor, no_checks)
    return GPUShaderModule(label, handle, device)


@dataclass
class Device:
    """A wgpu device plus what rlxpy needs to know about it."""

    adapter: Any
    device: Any
    limits: dict[str, int]
    features: set[str]
    info: dict[str, Any]
    reason: str = ""
    #: why the device is gone, once known (see ``probe``); every later use raises DeviceLostError
    lost: str | None = None
    _pipelines: dict[str, Any] = field(default_factory=dict)
    _layouts: dict[int, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def queue(self) -> Any:
        return self.device.queue

    @property
    def name(self) -> str:
        return f"{self.info.get('device', '?')} ({self.info.get('backend_type', '?')})"

    @property
    def is_cpu(self) -> bool:
        return self.info.get("adapter_type") == "CPU"

    def describe(self) -> str:
        """One line: which adapter, why, and for a CPU adapter a hint."""
        line = f"adapter {self.name}, {self.info.get('adapter_type', '?')} ({self.reason})"
        if self.is_cpu:
            line += ("; this adapter runs shaders on the CPU (Mesa's llvmpipe): expect a few tokens/s, "
                     "a GPU driver (Vulkan/Metal/DX12) is many times faster")
        return line

    @property
    def max_binding(self) -> int:
        """Largest storage binding rlxpy plans for. RLX_WGPU_MAX_BINDING lowers it: read here at every
        compile (get_device() is cached, so a later env.override still applies) and passed to the
        device's required_limits when set before the device is made (then wgpu enforces it too)."""
        limit = self.limits["max-storage-buffer-binding-size"]
        cap = int(env.MAX_BINDING)
        return min(limit, cap) if cap > 0 else limit

    @property
    def storage_align(self) -> int:
        return max(256, self.limits["min-storage-buffer-offset-alignment"])

    @property
    def uniform_align(self) -> int:
        return max(256, self.limits["min-uniform-buffer-offset-alignment"])

    @property
    def max_buffer(self) -> int:
        return self.limits["max-buffer-size"]

    def bind_group_layout(self, uniform_size: int) -> Any:
        """The one layout every step uses (per uniform record size)."""
        wgpu = wgpu_module()
        with self._lock:
            if uniform_size not in self._layouts:
                compute = wgpu.ShaderStage.COMPUTE
                self._layouts[uniform_size] = self.device.create_bind_group_layout(
                    label=f"rlx_layout_u{uniform_size}",
                    entries=[
                        {"binding": 0, "visibility": compute,
                         "buffer": {"type": wgpu.BufferBindingType.storage, "has_dynamic_offset": True}},
                        {"binding": 1, "visibility": compute,
                         "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True,
                                    "min_binding_size": uniform_size}},
                    ])
            return self._layouts[uniform_size]

    def pipeline(self, label: str, source: str, uniform_size: int, checked: bool = True) -> Any:
        """Compile (once) the WGSL ``source``; cached by its text, the layout and ``checked``. ``label``
        names the step that compiles it (``kernel:node``): the module, layout and pipeline carry it,
        so a wgpu error names the node; later steps with the same WGSL share the pipeline.
        ``checked=False`` (a kernel's contract, ``Kernel.checked``) compiles without WGSL's runtime
        checks unless RLX_WGPU_CHECKED_SHADERS is set."""
        checked = checked or bool(env.CHECKED_SHADERS)
        key = hashlib.sha1(f"{uniform_size}\0{int(checked)}\0{source}".encode()).hexdigest()
        with self._lock:
            cached = self._pipelines.get(key)
        if cached is not None:
            return cached
        layout = self.bind_group_layout(uniform_size)
        try:
            module = self.device.create_shader_module(label=label, code=source)  # naga's report on errors
            if not checked:
                module = unchecked_module(self.device, label, source)
            pipeline_layout = self.device.create_pipeline_layout(label=label, bind_group_layouts=[layout])
            pipeline = self.device.create_compute_pipeline(
                label=label, layout=pipeline_layout, compute={"module": module, "entry_point": "main"})
        except Exception as e:  # wgpu raises GPUValidationError with naga's report
            raise KernelError(f"kernel {label}: WGSL rejected by wgpu:\n{e}") from e
        with self._lock:
            self._pipelines[key] = pipeline
        return pipeline

    def probe(self) -> str | None:
        """Why the device is lost, or None while it works. wgpu-native exposes no lost state (its
        lost future is unimplemented) and aborts the process on a submit to a lost device, so a
        failed wgpu call is followed by this: a 4-byte buffer, which wgpu refuses on a lost device."""
        if self.lost is None:
            try:
                self.device.create_buffer(label="rlx_probe", size=4, usage=wgpu_module().BufferUsage.COPY_DST
                                          ).destroy()
            except Exception as e:  # noqa: BLE001 - any refusal that says "lost" is the answer
                text = " ".join(str(e).split())
                if "lost" in text.lower():
                    self.lost = text
        return self.lost

    def check(self, what: str) -> None:
        """DeviceLostError when the device is known to be lost (an attribute read: cheap per run)."""
        if self.lost is not None:
            raise self.lost_error(what)

    def lost_error(self, what: str) -> DeviceLostError:
        return DeviceLostError(f"{what}: the WebGPU device {self.name} was lost ({self.lost}); everything "
                               "compiled on it is gone: compile again (rlxpy.compile makes a new device)")

    def require_feature(self, feature: str, what: str) -> None:
        if feature not in self.features:
            raise UnsupportedOpError(f"{what} needs the '{feature}' feature, which {self.name} lacks")


#: Adapter preference, best first: a real GPU (native API before GL, discrete before integrated),
#: then Mesa's lavapipe (CPU Vulkan), then llvmpipe's GL (where backends differ most in practice).
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4}
_NATIVE = ("Vulkan", "Metal", "D3D12")


def adapter_rank(info: dict[str, Any]) -> tuple[bool, bool, int]:
    """Sort key of an adapter's info (smaller is better)."""
    cpu = info.get("adapter_type") == "CPU"
    return cpu, info.get("backend_type") not in _NATIVE, _TYPE_RANK.get(str(info.get("adapter_type")), 3)


def _describe(info: dict[str, Any]) -> str:
    return f"{info.get('device', '?')} ({info.get('backend_type', '?')}, {info.get('adapter_type', '?')})"


def _pick_adapter(wgpu: Any) -> tuple[Any, str]:
    """The adapter to use and a one-line reason."""
    adapters = list(wgpu.gpu.enumerate_adapters_sync())
    wanted = str(env.ADAPTER).lower()
    if wanted:
        for adapter in adapters:
            text = " ".join(str(v) for v in adapter.info.values()).lower()
            if wanted in text:
                return adapter, f"RLX_WGPU_ADAPTER={env.ADAPTER}"
        seen = "; ".join(_describe(dict(a.info)) for a in adapters) or "none"
        raise UnsupportedOpError(f"RLX_WGPU_ADAPTER={wanted!r}: no adapter matches (adapters: {seen})")
    if not adapters:
        return None, "no adapter"
    ranked = sorted(adapters, key=lambda a: adapter_rank(dict(a.info)))
    best = ranked[0]
    others = ", ".join(_describe(dict(a.info)) for a in ranked[1:])
    return best, "best of " + (f"{len(adapters)} adapters (also: {others})" if others else "1 adapter")


_CURRENT: Device | None = None
_CURRENT_LOCK = threading.Lock()


def get_device() -> Device:
    """The shared device, made on first use and again when the last one was lost (destroyed, or a
    driver reset). Raises UnsupportedOpError when wgpu finds no adapter."""
    global _CURRENT
    with _CURRENT_LOCK:
        if _CURRENT is None or _CURRENT.probe() is not None:
            _CURRENT = _make_device()
        return _CURRENT


def _make_device() -> Device:
    wgpu = wgpu_module()
    try:
        adapter, reason = _pick_adapter(wgpu)
    except Exception as e:
        raise UnsupportedOpError(f"no WebGPU adapter: {e}. On Linux without a GPU install "
                                 "mesa-vulkan-drivers (lavapipe).") from e
    if adapter is None:
        raise UnsupportedOpError("no WebGPU adapter found; install mesa-vulkan-drivers for lavapipe")
    features = [f for f in WANTED_FEATURES if f in adapter.features]
    binding = adapter.limits["max-storage-buffer-binding-size"]
    cap = int(env.MAX_BINDING)
    if 0 < cap < binding:  # wgpu then validates every binding against the cap too
        binding = max(cap // 4 * 4, 4)
    limits = {
        "max_storage_buffer_binding_size": binding,
        "max_buffer_size": adapter.limits["max-buffer-size"],
    }
    device = adapter.request_device_sync(label="rlxpy", required_features=features, required_limits=limits)
    made = Device(adapter, device, dict(device.limits), set(device.features), dict(adapter.info), reason)
    _note_destroy(made)
    return made


def _note_destroy(dev: Device) -> None:
    """Mark ``dev`` lost when its GPUDevice is destroyed: a run checks the mark before it submits
    (wgpu-native would abort the process), without a probe per run."""
    destroy = dev.device.destroy

    def destroy_and_mark() -> None:
        dev.lost = dev.lost or "destroyed by GPUDevice.destroy()"
        destroy()

    dev.device.destroy = destroy_and_mark


def main(argv: list[str]) -> int:
    """``--probe``: print the chosen adapter (exit 1 without one). ``--needs-driver``: exit 0 when no
    hardware adapter and no CPU Vulkan adapter exist, i.e. when set-up should install lavapipe.
    ``--has TEXT``: exit 0 when an adapter's description contains TEXT (``make test`` asks for GL)."""
    if "--has" in argv:  # --has TEXT: exit 0 when some adapter's description contains TEXT
        text = argv[argv.index("--has") + 1].lower()
        infos = [dict(a.info) for a in wgpu_module().gpu.enumerate_adapters_sync()]
        return 0 if any(text in " ".join(map(str, i.values())).lower() for i in infos) else 1
    if "--needs-driver" in argv:
        infos = [dict(a.info) for a in wgpu_module().gpu.enumerate_adapters_sync()]
        usable = [i for i in infos if i.get("adapter_type") != "CPU" or i.get("backend_type") in _NATIVE]
        return 1 if usable else 0
    if "--probe" in argv:
        try:
            dev = get_device()
        except Exception as e:  # noqa: BLE001 - the probe reports any failure
            print(f"no adapter: {e}", file=sys.stderr)
            return 1
        binding = dev.limits["max-storage-buffer-binding-size"]
        print(f"{dev.describe()}; max storage binding {binding} B; features: {sorted(dev.features)}")
        return 0
    print("usage: python -m rlxpy.wgpu_backend.device --probe | --needs-driver | --has TEXT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

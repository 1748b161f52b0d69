"""WgpuExecutable: a compiled graph on the device. set_param, run, reports, NaN trace.

Per run: validate everything first (so a bad call leaves the executable usable), upload the
inputs whose bytes changed, encode every GPU step into one pass per segment (host steps split
segments), and fuse the output readback into the last submit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from rlxpy import env
from rlxpy.errors import EnvError, InputError, RlxError
from rlxpy.ir import ops
from rlxpy.ir.dtype import DType, from_storage, to_storage
from rlxpy.ir.graph import Graph, Node
from rlxpy.ir.reference import check_value
from rlxpy.ir.shape import format_shape
from rlxpy.wgpu_backend import debug, profile, shadow
from rlxpy.wgpu_backend.arena import Arena, tensor_bytes
from rlxpy.wgpu_backend.compiler import CompiledSchedule, lower_graph, prepare
from rlxpy.wgpu_backend.device import Device, get_device
from rlxpy.wgpu_backend.encode import Encoder
from rlxpy.wgpu_backend.extent import apply_extent
from rlxpy.wgpu_backend.memplan import align_up
from rlxpy.wgpu_backend.schedule import DeviceFacts

#: Inputs up to this size are kept to skip re-uploading an unchanged input (token ids, masks).
REMEMBERED_INPUT_BYTES = 4 << 20


def device_facts(dev: Device) -> DeviceFacts:
    variant = str(env.KERNEL_VARIANT)
    if variant not in ("auto", "gpu", "cpu"):
        raise EnvError(f"RLX_WGPU_KERNELS={variant!r}: expected auto, gpu or cpu")
    cpu = dev.is_cpu if variant == "auto" else variant == "cpu"
    return DeviceFacts(dev.max_binding, dev.storage_align, dev.limits["max-compute-workgroup-storage-size"],
                       dev.limits["max-compute-invocations-per-workgroup"], frozenset(dev.features), cpu,
                       dev.is_cpu)


class HostIO:
    """What a host step sees: typed reads and writes of node tensors in the arena."""

    def __init__(self, exe: WgpuExecutable) -> None:
        self._exe = exe

    def read(self, node_id: int) -> np.ndarray:
        return self._exe.read_node(self._exe.graph.nodes[node_id])

    def read_bytes(self, node_id: int) -> bytes:
        node = self._exe.graph.nodes[node_id]
        return self._exe.arena.read(self._exe.schedule.node_offset(node_id), node.numel * node.dtype.itemsize)

    def write(self, node_id: int, value: np.ndarray) -> None:
        node = self._exe.graph.nodes[node_id]
        data = to_storage(np.asarray(value).reshape(node.shape), node.dtype)
        self._exe.arena.write(self._exe.schedule.node_offset(node_id), data)


class WgpuExecutable:
    """A static graph compiled for one device."""

    def __init__(self, graph: Graph, device: Device | None = None, keep_all: bool = False,
                 f16_weights: Iterable[str] | None = None) -> None:
        """``f16_weights``: names of the params to store as f16 (the f16 shadow); None lets the flags
        and the binding cap decide (shadow.py)."""
        started = time.perf_counter()
        #: the run-time flags, copied from the environment now (env.RunFlags): runs never read it
        self.flags = env.RunFlags.from_env()
        self.source_graph = graph
        self.device = device or get_device()
        self.device.check(f"compile {graph.name}")
        facts = device_facts(self.device)
        #: {param name: its f32 node} for params stored as f16 (shadow.py); set_param converts them
        self.shadowed: dict[str, Node]
        prepared = prepare(graph)
        chosen = shadow.choose(prepared, facts.max_binding, facts.storage_align, shadow_mode()) \
            if f16_weights is None else shadow.named(prepared, f16_weights)
        self.graph, self.shadowed = shadow.apply(prepared, chosen)
        self.schedule: CompiledSchedule = lower_graph(self.graph, facts, keep_all)
        self.arena = Arena(self.device, align_up(self.schedule.arena.size, self.device.storage_align))
        self._inputs = {n.op.name: n for n in self.graph.inputs()}
        self._params = {n.op.name: n for n in self.graph.params()}
        self._params_set: set[str] = set()
        self._last_inputs: dict[str, np.ndarray] = {}
        self._upload_constants()
        self.encoder = Encoder(self.device, self.arena, self.schedule.steps, self.schedule.window_size,
                               raw=bool(env.RAW_ENCODE))
        self.compile_seconds = time.perf_counter() - started
        self.last_run_seconds = 0.0
        self.keep_all = keep_all  # a debug twin: its runs are not explained again
        #: the first NaN/Inf node of the last run (RLX_WGPU_NAN_TRACE), see debug.nan_nodes
        self.last_nan: dict[str, Any] | None = None
        self.active_extent: tuple[int, int] | None = None
        self._extent_states: dict[tuple[int, int] | None, tuple[bytes, list, int]] = {}
        self._needed_cache: dict[tuple[int, ...], tuple[set[int], frozenset[int]]] = {}
        if env.report_level() >= 1:
            debug.print_report(self)

    # -- parameters -----------------------------------------------------------------------------
    def param_names(self) -> list[str]:
        return list(self._params)

    def param_nbytes(self, name: str) -> int:
        """Bytes param ``name`` takes in the arena (what set_param_bytes expects)."""
        return self._param(name).nbytes

    def set_param(self, name: str, value: Any) -> None:
        """Upload a param's values; an f16-shadowed f32 param is rounded to f16 (nearest even)."""
        node = self._param(name)
        source = self.shadowed.get(name)
        if source is not None:
            data = to_shadow(name, check_value(source, value, "param"))
        else:
            data = to_storage(check_value(node, value, "param"), node.dtype)
        try:
            self.arena.write(self.schedule.node_offset(node.id), data)
        except BaseException as e:
            self._after_failure(e, f"set_param {name!r}")
            raise
        self._params_set.add(name)

    def set_param_bytes(self, name: str, data: bytes | np.ndarray) -> None:
        """Write raw arena bytes (e.g. GGUF blocks for a u8 param); length must match exactly. An
        f16-shadowed param takes its f32 bytes (converted like set_param) or its f16 bytes as they are."""
        node = self._param(name)
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) \
            else np.frombuffer(data, np.uint8)
        want = node.numel * node.dtype.itemsize
        source = self.shadowed.get(name)
        if source is not None and raw.nbytes == source.nbytes and raw.nbytes != want:
            self.set_param(name, raw.view(np.float32).reshape(source.shape))
            return
        if raw.nbytes != want:
            also = "" if source is None else f" (or {source.nbytes} bytes of f32: stored as an f16 shadow)"
            raise InputError(f"param {name!r} ({node.type}): expected {want} bytes{also}, got {raw.nbytes}")
        try:
            self.arena.write(self.schedule.node_offset(node.id), raw.tobytes())
        except BaseException as e:
            self._after_failure(e, f"set_param_bytes {name!r}")
            raise
        self._params_set.add(name)

    def _param(self, name: str) -> Node:
        if name not in self._params:
            known = ", ".join(sorted(self._params)[:20])
            raise InputError(f"no param named {name!r}; params: {known or 'none'}")
        return self._params[name]

    def _upload_constants(self) -> None:
        for node in self.graph.nodes:
            if isinstance(node.op, ops.Constant):
                self.arena.write(self.schedule.node_offset(node.id), node.op.data)

    # -- running --------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
            feeds: Mapping[str, GpuHandle] | None = None) -> dict[str, np.ndarray]:
        """Run the schedule; returns {output name: array}.

        ``outputs``: compute and read back only these. ``feeds``: {input name: GpuHandle} copies a
        tensor already on the GPU (e.g. last run's output) into the input, with no host round-trip."""
        return self.submit(inputs, outputs, feeds)()

    def submit(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
               feeds: Mapping[str, GpuHandle] | None = None) -> Callable[[], dict[str, np.ndarray]]:
        """``run`` without waiting: returns a function that waits for and returns the outputs. A
        caller may submit the next run (e.g. the next decode step, fed on the GPU) before reading
        this one, so the GPU never idles while the host reads back; read each run before
        submitting the one after it.

        With a run-time debug flag on (``self.flags.debug()``) each run is explained before this
        returns: profiled as it runs, then re-run on the keep-all twin with the same inputs."""
        if not self.keep_all and self.flags.debug():
            out = self._explained_run(inputs, outputs, feeds)
            return lambda: out
        return self._submit(inputs, outputs, feeds)

    def _submit(self, inputs: Mapping[str, Any] | None, outputs: Iterable[str] | None,
                feeds: Mapping[str, GpuHandle] | None, timer: Any = None
                ) -> Callable[[], dict[str, np.ndarray]]:
        started = time.perf_counter()
        wanted = self._resolve_outputs(outputs)
        needed, steps = self._needed(wanted, outputs is not None)
        copies = self._feed_copies(feeds or {})
        fed = set(feeds or {})
        staged = self._validate_inputs({k: v for k, v in (inputs or {}).items()}, needed, fed)
        missing = sorted(set(self._params) - self._params_set)
        if missing:
            raise InputError(f"params not set: {', '.join(missing[:10])}"
                             + (f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""))
        reads = [] if self.flags.dispatch_only else [
            (self.schedule.node_offset(n.id), n.numel * n.dtype.itemsize) for n in wanted]

        def upload() -> None:
            wrote = [self._upload_input(name, node, data) for name, (node, data) in staged.items()]
            # an upload to a lost device fails (and the failure is probed); with nothing uploaded, no wgpu
            # call has met the loss yet and the submit would abort the process: probe first
            if not any(wrote) and self.device.probe() is not None:
                self.device.check(f"run {self.graph.name}")

        if self.device.lost is not None:  # a submit to a lost device aborts the process
            self.device.check(f"run {self.graph.name}")
        try:
            pending = self.encoder.submit(HostIO(self), reads, steps, copies, before_submit=upload,
                                          timer=timer)
        except BaseException as e:
            self._after_failure(e, f"run {self.graph.name}")
            raise

        def result() -> dict[str, np.ndarray]:
            try:
                chunks = pending()
            except BaseException as e:
                self._after_failure(e, f"run {self.graph.name} (readback)")
                raise
            out = {n.name: self._decode(n, chunk) for n, chunk in zip(wanted, chunks)}
            self.last_run_seconds = time.perf_counter() - started
            return out

        return result

    def _after_failure(self, error: BaseException, what: str) -> None:
        """After a failed upload, run or readback (a host step raising, Ctrl-C, ...) the executable
        stays usable: the next run uploads every input again (the arena may hold a half-done upload).
        A wgpu error on a lost device becomes DeviceLostError (raised here, from the wgpu error)."""
        self._last_inputs.clear()
        wgpu_error = isinstance(error, Exception) and not isinstance(error, RlxError)
        if wgpu_error and self.device.probe() is not None:
            raise self.device.lost_error(what) from error

    def _explained_run(self, inputs: Mapping[str, Any] | None, outputs: Iterable[str] | None,
                       feeds: Mapping[str, GpuHandle] | None) -> dict[str, np.ndarray]:
        """One run under the debug flags: synchronous, so the next run (say the next decode step)
        starts after this one is explained."""
        flags = self.flags.debug()
        debug.say_once(f"rlxpy: {', '.join(flags)} on: every run is read back and explained before the "
                       "next one starts (decode steps are not pipelined)")
        outputs = None if outputs is None else list(outputs)
        # the run's inputs as the run sees them: a fed handle is read before the run overwrites it
        seen = {**(inputs or {}), **{name: handle.read() for name, handle in (feeds or {}).items()}}
        if self.flags.profile or self.flags.trace:
            out, prof = self.timed_run(inputs, outputs, feeds)
            profile.explain_profile(prof, self.flags)
        else:
            out = self._submit(inputs, outputs, feeds)()
        explain = self.flags.nan_trace or self.flags.dump_nodes
        self.last_nan = debug.explain_values(self, seen, outputs) if explain else None
        return out

    def timed_run(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
                  feeds: Mapping[str, GpuHandle] | None = None) -> tuple[dict[str, np.ndarray], Any]:
        """``run`` with every step timed: (outputs, profile.Profile)."""
        timer = profile.StepTimer(self.device)
        out = self._submit(inputs, outputs, feeds, timer)()
        return out, profile.build_profile(self, timer.collect())

    def needed_nodes(self, outputs: Iterable[str] | None = None) -> list[Node]:
        """The nodes a run of ``outputs`` (None: every output) computes or reads, in schedule order."""
        if outputs is None:
            return list(self.graph.nodes)
        needed, _ = self._needed(self._resolve_outputs(outputs), True)
        return [n for n in self.graph.nodes if n.id in needed]  # type: ignore[operator]

    def step_indices(self, outputs: Iterable[str] | None = None) -> list[int]:
        """The schedule indices of the steps a run of ``outputs`` (None: every output) runs."""
        if outputs is None:
            return list(range(len(self.schedule.steps)))
        return sorted(self._needed(self._resolve_outputs(outputs), True)[1])  # type: ignore[arg-type]

    def keep_all_twin(self) -> WgpuExecutable:
        """A fresh executable of the same graph with every tensor kept alive (debug re-runs)."""
        return WgpuExecutable(self.source_graph, self.device, keep_all=True, f16_weights=self.shadowed)

    def copy_params_to(self, other: WgpuExecutable) -> None:
        """Copy every set param into ``other`` (compiled from the same graph) on the GPU."""
        command = self.device.device.create_command_encoder(label="rlx_param_copy")
        for name in sorted(self._params_set):
            node = self._params[name]
            offset = self.schedule.node_offset(node.id)
            other.copy_param_from(command, name, self.arena.buffer, offset, node.nbytes)
        self.device.queue.submit([command.finish()])

    def copy_param_from(self, command: Any, name: str, buffer: Any, offset: int, nbytes: int) -> None:
        """Record into ``command`` (the caller submits it) a GPU copy of ``nbytes`` at ``offset`` of
        ``buffer`` into param ``name``; the param counts as set."""
        node = self._param(name)
        if nbytes:
            target = self.schedule.node_offset(node.id)
            command.copy_buffer_to_buffer(buffer, offset, self.arena.buffer, target, align_up(nbytes, 4))
        self._params_set.add(name)

    def _needed(self, wanted: list[Node], partial: bool) -> tuple[set[int] | None, frozenset[int] | None]:
        """Node ids and step indices the requested outputs depend on (None = everything)."""
        if not partial:
            return None, None
        key = tuple(n.id for n in wanted)
        if key not in self._needed_cache:
            needed: set[int] = set()
            stack = list(key)
            while stack:
                node_id = stack.pop()
                if node_id not in needed:
                    needed.add(node_id)
                    stack.extend(self.graph.nodes[node_id].inputs)
            steps = frozenset(i for i, step in enumerate(self.schedule.steps)
                              if self.graph[step.node].id in needed)
            self._needed_cache[key] = (needed, steps)
        return self._needed_cache[key]

    def handle(self, name: str) -> GpuHandle:
        """A handle on node ``name``'s bytes in the arena (an output or input), read on demand."""
        node = self.graph[name] if isinstance(name, str) else name
        return GpuHandle(self, node)

    def _feed_copies(self, feeds: Mapping[str, GpuHandle]) -> list[tuple[int, int, int]]:
        copies = []
        for name, handle in feeds.items():
            if name not in self._inputs:
                raise InputError(f"feed {name!r} is not a graph input; inputs: {sorted(self._inputs)}")
            node = self._inputs[name]
            if not isinstance(handle, GpuHandle) or handle.exe is not self:
                raise InputError(f"feed {name!r}: expected a GpuHandle of this executable, got {handle!r}")
            if handle.node.type != node.type:
                raise InputError(f"feed {name!r} ({node.type}) from {handle.node.name} ({handle.node.type}): "
                                 "types differ")
            target = self.schedule.node_offset(node.id)
            if handle.offset != target:  # a feed of the input's own slot (last run's input) moves nothing
                copies.append((handle.offset, target, node.nbytes))
            self._last_inputs.pop(name, None)  # the slot no longer holds the last upload
        return copies

    def _validate_inputs(self, inputs: Mapping[str, Any], needed: set[int] | None = None,
                         fed: set[str] = frozenset()) -> dict[str, tuple[Node, np.ndarray]]:
        unknown = [k for k in inputs if k not in self._inputs]
        if unknown:
            raise InputError(f"unknown inputs {unknown}; graph inputs: {sorted(self._inputs)}")
        absent = [k for k, node in self._inputs.items()
                  if k not in inputs and k not in fed and (needed is None or node.id in needed)]
        if absent:
            expected = ", ".join(f"{k} {self._inputs[k].type}" for k in absent)
            raise InputError(f"missing inputs: {expected}")
        staged = {}
        for name, value in inputs.items():
            node = self._inputs[name]
            array = check_value(node, value, "input")
            staged[name] = (node, to_storage(array, node.dtype))
        return staged

    def _upload_input(self, name: str, node: Node, data: np.ndarray) -> bool:
        """Write the input unless it equals the last upload; True when it wrote."""
        # Compare with the last upload (memcmp speed) rather than hashing: cheaper for big inputs. The
        # first bytes first: a new input (a new image, say) usually differs there, and then is not
        # read twice more by a full comparison. Inputs over REMEMBERED_INPUT_BYTES are always written:
        # keeping a copy and comparing costs about as much as the upload it could save.
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        last = self._last_inputs.get(name)
        if (not self.flags.force_input_upload and last is not None and last.size == flat.size
                and np.array_equal(last[:4096], flat[:4096]) and np.array_equal(last, flat)):
            return False
        self.arena.write(self.schedule.node_offset(node.id), memoryview(flat))
        if flat.size <= REMEMBERED_INPUT_BYTES:
            self._last_inputs[name] = flat.copy()
        else:
            self._last_inputs.pop(name, None)
        return True

    def set_active_extent(self, extent: tuple[int, int] | None) -> int:
        """Run the next runs on the first ``actual`` of ``upper`` leading rows (None: full).

        Returns how many steps scale. No recompile. The uniforms and grids of each extent are
        computed once and kept: going back to an extent seen before is one uniform upload (a batched
        decoder toggles between its live rows and the full prefill often)."""
        if extent == self.active_extent:
            return self._extent_states[extent][2] if extent in self._extent_states else 0
        state = self._extent_states.get(extent)
        if state is not None:
            blob, grids, count = state
            self.encoder.restore(blob, grids)
        else:
            count = self._apply_extent(extent)
            self._extent_states[extent] = (bytes(self.encoder.blob), list(self.encoder.grids), count)
        self.active_extent = extent
        return count

    def _apply_extent(self, extent: tuple[int, int] | None) -> int:
        if extent is None:
            self.encoder.invalidate()
            for index, step in enumerate(self.schedule.steps):
                if step.kind == "gpu":
                    self.encoder.write_uniforms(index, step.uniforms)
                    self.encoder.grids[index] = step.grid
            return 0
        self._apply_extent(None)  # each extent's state from the full one, whatever ran before
        actual, upper = extent
        return apply_extent(self.schedule.steps, self.encoder, actual, upper)

    def sync(self) -> None:
        """Wait until the GPU finished everything submitted so far."""
        from rlxpy.wgpu_backend.readback import wait_idle  # wgpu-native's C calls: device side only

        self.device.check(f"sync {self.graph.name}")  # a poll of a lost device may abort the process
        wait_idle(self.device.device)

    def _resolve_outputs(self, outputs: Iterable[str] | None) -> list[Node]:
        out_nodes = [self.graph.nodes[i] for i in self.graph.outputs]
        if outputs is None:
            return out_nodes
        by_name = {n.name: n for n in out_nodes}
        chosen = []
        for name in outputs:
            if name not in by_name:
                raise InputError(f"{name!r} is not a graph output; outputs: {sorted(by_name)}")
            chosen.append(by_name[name])
        return chosen

    def _decode(self, node: Node, raw: bytes) -> np.ndarray:
        storage = np.frombuffer(raw, dtype=node.dtype.storage_numpy, count=node.numel)
        return from_storage(storage, node.dtype).reshape(node.shape).copy()

    def _read_node(self, node: Node) -> np.ndarray:
        raw = self.arena.read(self.schedule.node_offset(node.id), node.numel * node.dtype.itemsize)
        return self._decode(node, raw)

    # -- debugging ------------------------------------------------------------------------------
    def read_node(self, name: str | Node) -> np.ndarray:
        """The current arena contents of node ``name`` (meaningful for live tensors only)."""
        return self._read_node(self.graph[name] if isinstance(name, str) else name)

    def first_nan_node(self, inputs: Mapping[str, Any], outputs: Iterable[str] | None = None
                       ) -> dict[str, Any] | None:
        """Run with every tensor kept alive; the first node (in order) whose output is not finite."""
        return debug.first_nan_node(self, inputs, outputs)

    def profile(self, inputs: Mapping[str, Any] | None = None, outputs: Iterable[str] | None = None,
                feeds: Mapping[str, GpuHandle] | None = None) -> Any:
        """Run once with every step timed (timestamp queries): a profile.Profile (the dispatch
        report's rows of the steps that ran, with ``gpu_ms``/``host_ms``; ``.save(path)`` writes a
        Chrome trace)."""
        return self.timed_run(inputs, outputs, feeds)[1]

    def report(self) -> Any:
        return debug.build_report(self)

    def destroy(self) -> None:
        self.arena.destroy()

    def __repr__(self) -> str:
        return (f"<WgpuExecutable {self.graph.name}: {len(self.schedule.steps)} steps, "
                f"arena {self.arena.size / 2**20:.1f} MiB on {self.device.name}>")


class GpuHandle:
    """A tensor that stays on the GPU: feed it into an input, or read it when needed."""

    def __init__(self, exe: WgpuExecutable, node: Node) -> None:
        self.exe, self.node = exe, node
        self.offset = exe.schedule.node_offset(node.id)

    def read(self) -> np.ndarray:
        return self.exe.read_node(self.node)

    def __repr__(self) -> str:
        return f"<GpuHandle {self.node.name} {self.node.type}>"


def shadow_mode() -> str:
    """The f16 shadow's mode from the flags: MATMUL_F32_ONLY wins over F16_WEIGHTS."""
    if env.MATMUL_F32_ONLY:
        return "off"
    return "force" if env.F16_WEIGHTS else "auto"


def to_shadow(name: str, array: np.ndarray) -> np.ndarray:
    """f32 values as the f16 shadow stores them (round to nearest even, like torch's ``.half()``);
    a finite value beyond f16's range would become inf: InputError rather than a silent wrong answer."""
    with np.errstate(over="ignore"):
        half = array.astype(np.float16)
    if np.isinf(half).any():
        bad = np.isinf(half) & np.isfinite(array)
        if bad.any():
            index = np.unravel_index(int(np.flatnonzero(bad)[0]), array.shape)
            raise InputError(f"param {name!r} is stored as f16 (the f16 shadow) but holds {array[index]!r} "
                             f"at {list(map(int, index))}, beyond f16's range (65504); set "
                             "RLX_WGPU_MATMUL_F32_ONLY=1 or scale the weight")
    return half


def output_bytes(node: Node) -> int:
    return tensor_bytes(node)


__all__ = ["DType", "HostIO", "WgpuExecutable", "format_shape"]

"""Reading a mapped readback buffer in one call on the calling thread.

wgpu-py's ``map_sync`` submits an empty command buffer first (for buffers written through a mapping,
which ours never are: every readback buffer is filled by a copy in a submitted command buffer), then
waits on a promise that its polling thread resolves: two thread hand-offs. On an H100 that cost
0.21 ms per wait, against 0.07 ms for ``wgpuBufferMapAsync`` + a blocking ``wgpuDevicePoll`` on the
calling thread, which is what ``map_read`` does (wgpu-native's C calls, as encode.py's dispatch loop
uses them). The map callback may run on any thread that polls the device; it only records the
status.

A pipelined caller (the decode loop) has the next run submitted while it reads this one: a poll
without a submission index waits until the queue is idle, i.e. for the next run too, and the GPU
then idles while the host submits the one after. ``map_read`` takes the index of the submission
that filled the buffer (``submit_for_index``) and waits for that one only."""

from __future__ import annotations

from typing import Any

from wgpu.backends.wgpu_native._ffi import ffi, lib

#: blocking polls before a map that never completes is an error (one normally suffices: the poll
#: returns once the queue is idle, and the map completes with it)
MAX_POLLS = 1000


@ffi.callback("void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)")
def _mapped(status: int, _message: Any, box: Any, _unused: Any) -> None:
    ffi.from_handle(box).append(int(status))


def submit_for_index(queue: Any, commands: Any) -> int:
    """``queue.submit([commands])``, returning the submission's index (for ``map_read``)."""
    handles = ffi.new("WGPUCommandBuffer[]", [commands._internal])
    return int(lib.wgpuQueueSubmitForIndex(queue._internal, 1, handles))


def wait_idle(device: Any) -> None:
    """Block until the GPU finished every submission so far: one blocking poll, no copy or map."""
    lib.wgpuDevicePoll(device._internal, True, ffi.NULL)


def map_read(device: Any, buffer: Any, size: int, mapped: int, submission: int | None = None) -> bytes:
    """The first ``size`` bytes of ``buffer`` (a MAP_READ buffer whose copies were submitted), mapping
    ``mapped`` bytes (a multiple of 4). ``submission``: the index of the submission that wrote it (the
    polls wait for that one only), else they wait for the queue to be idle. Raises RuntimeError when
    the map fails (say a lost device)."""
    index = ffi.NULL if submission is None else ffi.new("WGPUSubmissionIndex *", submission)
    status: list[int] = []
    box = ffi.new_handle(status)
    info = ffi.new("WGPUBufferMapCallbackInfo *")
    info.mode = lib.WGPUCallbackMode_AllowProcessEvents
    info.callback = _mapped
    info.userdata1 = box
    lib.wgpuBufferMapAsync(buffer._internal, lib.WGPUMapMode_Read, 0, mapped, info[0])
    for _ in range(MAX_POLLS):
        if status:
            break
        lib.wgpuDevicePoll(device._internal, True, index)
    if status != [lib.WGPUMapAsyncStatus_Success]:
        raise RuntimeError(f"could not map the readback buffer (map status {status or 'pending'})")
    try:
        return bytes(ffi.buffer(lib.wgpuBufferGetConstMappedRange(buffer._internal, 0, mapped), size))
    finally:
        lib.wgpuBufferUnmap(buffer._internal)

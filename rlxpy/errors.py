"""rlxpy's exception tree.

Each error also inherits the builtin a caller most likely already handles, so code can catch
``RlxError`` or plain ``ValueError`` / ``NotImplementedError``, whichever it knows.
"""

from __future__ import annotations


class RlxError(Exception):
    """Base of every error rlxpy raises on purpose."""


class GraphError(RlxError, ValueError):
    """A bad graph: shape, dtype, attribute or wiring."""


class InputError(RlxError, ValueError):
    """A missing or malformed input or parameter at run time."""


class UnsupportedOpError(RlxError, NotImplementedError):
    """No lowerer for an op, or a feature this adapter lacks."""


class LimitError(RlxError):
    """A window, workgroup, buffer or binding exceeds a device limit."""


class DeviceLostError(RlxError, RuntimeError):
    """The WebGPU device is gone (destroyed, driver reset): compile again, on the new device."""


class KernelError(RlxError):
    """WGSL or a pipeline was rejected by wgpu (wraps wgpu's error)."""


class ModelError(RlxError, ValueError):
    """A model file (GGUF, ONNX, ...) that rlxpy cannot read or does not support."""


class EnvError(RlxError, ValueError):
    """An RLX_* environment variable with a value that does not parse."""


class NumericsError(RlxError, FloatingPointError):
    """A NaN/Inf found by the NaN trace (RLX_WGPU_NAN_TRACE) that stops a generation."""


class RegistryError(RlxError):
    """A registry entry declared twice."""


def where(node: object) -> str:
    """The common prefix of every node-related message: ``name (Op)``."""
    name = getattr(node, "name", None) or f"%{getattr(node, 'id', '?')}"
    op = getattr(node, "op", None)
    return f"{name} ({type(op).__name__})" if op is not None else str(name)

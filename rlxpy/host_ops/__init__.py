"""CPU steps run between GPU passes (host fallback is explicit: a host step in the schedule).

Each module builds closures ``fn(io)`` for ``LowerCtx.host``: ``io.read(node_id)`` gives a node's
arena contents as an array, ``io.write(node_id, array)`` stores a result. They do numpy math only
and never touch wgpu, so they can be tested without a device.
"""

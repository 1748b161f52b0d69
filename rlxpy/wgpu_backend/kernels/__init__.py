"""WGSL kernels: each ``<name>.wgsl`` file is one kernel; see params.py for their uniforms."""

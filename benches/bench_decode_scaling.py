"""KV-cache decoding cost against the position t: one compiled graph serves every t, and the
attention steps' GPU time grows with t, not with the cache capacity L.

A random llama (F32 weights) with an L-token cache; for each t the decode branch runs at
position t (the cache rows before t hold random values) and the attention steps are timed with
timestamp queries. The executable is compiled once (its id and step count are reported)."""

from __future__ import annotations

import numpy as np
from common import emit, parse_args

from rlxpy.models.generate import Generator
from rlxpy.models.llama import LlamaConfig
from rlxpy.wgpu_backend.profile import step_times_ms


def main() -> None:
    args = parse_args(__doc__)
    capacity = 1024 if args.quick else 8192
    cfg = LlamaConfig(vocab_size=256, hidden=512, layers=2, heads=8, kv_heads=2, ffn=1024, context=capacity)
    gen = Generator(cfg, chunk=8)
    rng = np.random.default_rng(0)
    for name in gen.exe.param_names():
        node = gen.exe._params[name]
        values = rng.standard_normal(node.nbytes // 4).astype(np.float32) * 0.05
        gen.exe.set_param_bytes(name, values.tobytes())
    exe = gen.exe
    compiled = id(exe)
    decode_steps = exe._needed([exe.graph["decode_next"]], True)[1]
    attention = [i for i in decode_steps if exe.schedule.steps[i].kernel.startswith("attn_")]
    rows = []
    for t in [16, 128, 512, capacity // 2, capacity - 2]:
        gen.position = t
        gen.decode(3)
        times = step_times_ms(exe)
        rows.append(
            {
                "t": t,
                "attention_ms": sum(times[i] for i in attention),
                "decode_gpu_ms": sum(times[i] for i in decode_steps if i in times),
            }
        )
    assert id(gen.exe) == compiled
    emit({"capacity": capacity, "attention_steps": len(attention), "rows": rows}, args.json)


if __name__ == "__main__":
    main()

"""Mamba-1 language model (transformers' MambaForCausalLM): a prefill branch of ``chunk`` tokens and a
decode branch of one token in one graph, sharing the weights and the recurrent state.

Per layer (pre-norm residual block): RMSNorm -> in_proj into the mixer input xs and the gate ->
causal depthwise conv over the last ``conv - 1`` inputs and xs, SiLU -> x_proj into dt_in, B, C ->
dt = softplus(dt_proj(dt_in)) -> SelectiveScan with its state carried in place -> + D * xs,
* SiLU(gate) -> out_proj. Then RMSNorm and the LM head on the last real token.

State between runs, all on the GPU:

* ``blk.{i}.ssm_state`` [1, I, N]: the SelectiveScan's carried state.
* ``blk.{i}.conv_history`` [conv - 1 + chunk, I]: rows [shift, shift + conv - 1) hold the last
  ``conv - 1`` mixer inputs (``shift`` = the previous run's real token count). A run gathers them,
  writes them to rows [0, conv - 1) and its own inputs after them (CacheWrite, in place), and the
  conv reads the result: the history update lies on the path to the logits, so a run of one branch
  computes it.

A prefill chunk shorter than ``chunk`` is padded: padded rows get dt = 0, a step that leaves the scan
state as it is, and the next run's shift skips them. ``MambaGenerator`` drives the two branches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

import rlxpy
from rlxpy.errors import GraphError, InputError
from rlxpy.ir import Graph, Node

#: softplus(x) = x past this, as torch.nn.functional.softplus's default threshold
SOFTPLUS_THRESHOLD = 20.0


@dataclass(frozen=True)
class MambaConfig:
    vocab_size: int
    hidden: int
    layers: int
    inner: int  # intermediate size I (expand * hidden)
    state: int  # N
    conv: int  # conv kernel size
    dt_rank: int
    eps: float = 1e-5
    use_bias: bool = False  # in_proj / out_proj biases
    use_conv_bias: bool = True

    def check(self) -> None:
        sizes = (self.vocab_size, self.hidden, self.layers, self.inner, self.state, self.dt_rank)
        if min(sizes) < 1 or self.conv < 2:
            raise GraphError(f"mamba config: every size must be >= 1 and conv >= 2, got {self}")


def param_shapes(cfg: MambaConfig, chunk: int) -> dict[str, tuple[int, ...]]:
    """Every param's shape: matrices as [in, out] (transposed from torch's [out, in])."""
    h, i, n, r = cfg.hidden, cfg.inner, cfg.state, cfg.dt_rank
    shapes: dict[str, tuple[int, ...]] = {"embed": (cfg.vocab_size, h)}
    for layer in range(cfg.layers):
        p = f"blk.{layer}."
        shapes |= {p + "norm": (h,), p + "in_proj": (h, 2 * i), p + "conv_w": (cfg.conv, i),
                   p + "x_proj": (i, r + 2 * n), p + "dt_proj": (r, i), p + "dt_b": (i,), p + "A": (i, n),
                   p + "D": (i,), p + "out_proj": (i, h), p + "ssm_state": (1, i, n),
                   p + "conv_history": (cfg.conv - 1 + chunk, i)}
        if cfg.use_bias:
            shapes |= {p + "in_proj_b": (2 * i,), p + "out_proj_b": (h,)}
        if cfg.use_conv_bias:
            shapes[p + "conv_b"] = (i,)
    return shapes | {"norm_f": (h,), "lm_head": (h, cfg.vocab_size)}


def state_params(cfg: MambaConfig) -> Iterator[str]:
    """The params a new sequence starts from zero."""
    for layer in range(cfg.layers):
        yield f"blk.{layer}.ssm_state"
        yield f"blk.{layer}.conv_history"


def softplus(g: Graph, x: Node) -> Node:
    """log(1 + exp(x)), and x itself past the threshold (where exp would overflow), like torch."""
    smooth = g.activation(g.add(g.exp(x), 1.0), "log")
    return g.where(g.compare(x, SOFTPLUS_THRESHOLD, "gt"), x, smooth)


class _Branch:
    """One branch (``prefix``: prefill or decode) of ``rows`` tokens over the shared params."""

    def __init__(self, g: Graph, cfg: MambaConfig, params: dict[str, Node], prefix: str, rows: int) -> None:
        self.g, self.cfg, self.p, self.rows = g, cfg, params, rows
        self.tokens = g.input(f"{prefix}_tokens", (rows,), "i32")
        self.valid = g.input(f"{prefix}_valid", (1,), "i32")  # real tokens in this run
        self.shift = g.input(f"{prefix}_shift", (1,), "i32")  # real tokens in the previous run
        steps = g.constant(np.arange(rows, dtype=np.int32))
        real = g.compare(steps, self.valid, "lt")  # padded rows: dt = 0 keeps the scan state
        self.mask = g.reshape(g.cast(real, "f32"), (rows, 1))
        self.history_rows = g.add(self.shift, g.constant(np.arange(cfg.conv - 1, dtype=np.int32)))
        self.at_start = g.constant(np.array([0], np.int32))
        self.after_history = g.constant(np.array([cfg.conv - 1], np.int32))
        x = g.gather(params["embed"], self.tokens)
        for layer in range(cfg.layers):
            x = g.add(x, self.mixer(layer, g.rms_norm(x, params[f"blk.{layer}.norm"], eps=cfg.eps)))
        last = g.gather(g.rms_norm(x, params["norm_f"], eps=cfg.eps), g.sub(self.valid, 1))
        self.logits = g.matmul(last, params["lm_head"], name=f"{prefix}_logits")
        self.next = g.argmax(self.logits, name=f"{prefix}_next")

    def linear(self, x: Node, name: str) -> Node:
        y = self.g.matmul(x, self.p[name])
        return self.g.add(y, self.p[name + "_b"]) if name + "_b" in self.p else y

    def conv(self, layer: int, xs: Node) -> Node:
        """Causal depthwise conv of xs after the stored history, in place in conv_history."""
        g, k = self.g, self.cfg.conv
        history = self.p[f"blk.{layer}.conv_history"]
        earlier = g.gather(history, self.history_rows)  # before any write to history
        window = g.cache_write(g.cache_write(history, earlier, self.at_start), xs, self.after_history)
        weights = self.p[f"blk.{layer}.conv_w"]
        out = None
        for j in range(k):
            term = g.mul(g.narrow(window, 0, j, self.rows), g.narrow(weights, 0, j, 1))
            out = term if out is None else g.add(out, term)
        if f"blk.{layer}.conv_b" in self.p:
            out = g.add(out, self.p[f"blk.{layer}.conv_b"])
        return g.silu(out)

    def mixer(self, layer: int, h: Node) -> Node:
        g, cfg, rows = self.g, self.cfg, self.rows
        i, n, r = cfg.inner, cfg.state, cfg.dt_rank
        p = f"blk.{layer}."
        projected = self.linear(h, p + "in_proj")
        xs, gate = g.narrow(projected, 1, 0, i), g.narrow(projected, 1, i, i)
        u = self.conv(layer, xs)
        ssm = g.matmul(u, self.p[p + "x_proj"])
        dt_in, bm, cm = g.narrow(ssm, 1, 0, r), g.narrow(ssm, 1, r, n), g.narrow(ssm, 1, r + n, n)
        dt = g.mul(softplus(g, g.add(g.matmul(dt_in, self.p[p + "dt_proj"]), self.p[p + "dt_b"])), self.mask)
        y = g.selective_scan(g.reshape(u, (1, rows, i)), g.reshape(dt, (1, rows, i)), self.p[p + "A"],
                             g.reshape(bm, (1, rows, n)), g.reshape(cm, (1, rows, n)),
                             state=self.p[p + "ssm_state"])
        y = g.mul(g.add(g.reshape(y, (rows, i)), g.mul(u, self.p[p + "D"])), g.silu(gate))
        return self.linear(y, p + "out_proj")


def build_mamba(cfg: MambaConfig, chunk: int = 16) -> Graph:
    """The prefill (``chunk`` tokens) + decode (1 token) graph; see the module docstring."""
    cfg.check()
    if chunk < 1:
        raise GraphError(f"mamba: chunk must be >= 1, got {chunk}")
    g = Graph("mamba")
    params = {name: g.param(name, shape) for name, shape in param_shapes(cfg, chunk).items()}
    for branch in (_Branch(g, cfg, params, "prefill", chunk), _Branch(g, cfg, params, "decode", 1)):
        g.output(branch.logits, branch.next)
    return g


class MambaGenerator:
    """Compiled Mamba graph + the sequence state: ``prefill`` a prompt in chunks, ``decode`` one token at
    a time (greedy). Weights come from ``set_weights`` (rlxpy.frontends.hf_mamba.load_into)."""

    def __init__(self, config: MambaConfig, chunk: int = 16) -> None:
        self.config, self.chunk = config, chunk
        self.graph = build_mamba(config, chunk)
        self.exe = rlxpy.compile(self.graph)
        self.shift = 0
        self.reset()

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Every non-state param from ``weights`` (names and shapes of ``param_shapes``)."""
        states = set(state_params(self.config))
        for name, shape in param_shapes(self.config, self.chunk).items():
            if name not in states:
                value = np.ascontiguousarray(weights[name], np.float32)
                if value.shape != shape:
                    raise InputError(f"mamba param {name}: expected shape {shape}, got {value.shape}")
                self.exe.set_param(name, value)

    def reset(self) -> None:
        """Start a new sequence: zero scan states and conv history."""
        for name in state_params(self.config):
            self.exe.set_param_bytes(name, bytes(self.exe.param_nbytes(name)))
        self.shift = 0

    def _run(self, branch: str, tokens: np.ndarray, valid: int, what: Sequence[str] = ("logits", "next")
             ) -> dict[str, np.ndarray]:
        out = self.exe.run({f"{branch}_tokens": tokens, f"{branch}_valid": np.array([valid], np.int32),
                            f"{branch}_shift": np.array([self.shift], np.int32)},
                           outputs=[f"{branch}_{name}" for name in what])
        self.shift = valid
        return {name: out[f"{branch}_{name}"].reshape(-1) for name in what}

    def prefill(self, ids: Sequence[int], what: Sequence[str] = ("logits", "next")) -> dict[str, np.ndarray]:
        """Feed ``ids`` after what the state holds; returns ``what`` (logits, next: the greedy token)
        after the last one."""
        if not ids:
            raise InputError("the prompt is empty: give at least one token")
        out: dict[str, np.ndarray] = {}
        for start in range(0, len(ids), self.chunk):
            part = list(ids[start:start + self.chunk])
            if len(part) == 1:  # one token: the decode branch (no padded rows)
                out = self._run("decode", np.array(part, np.int32), 1, what)
                continue
            tokens = np.zeros(self.chunk, np.int32)
            tokens[:len(part)] = part
            out = self._run("prefill", tokens, len(part), what)
        return out

    def decode(self, token: int) -> np.ndarray:
        """Feed one token; returns the logits after it."""
        return self._run("decode", np.array([token], np.int32), 1, ("logits",))["logits"]

    def generate(self, ids: Sequence[int], max_tokens: int) -> list[int]:
        """Greedy continuation of ``ids`` from a fresh state (the argmax on the GPU: one int read back
        per token)."""
        self.reset()
        token = int(self.prefill(ids, ("next",))["next"][0])
        out = [token]
        while len(out) < max_tokens:
            token = int(self._run("decode", np.array([token], np.int32), 1, ("next",))["next"][0])
            out.append(token)
        return out

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """The next-token logits of ``ids`` from a fresh state."""
        self.reset()
        return self.prefill(ids, ("logits",))["logits"]


def dt_rank_of(hidden: int, rank: int | str) -> int:
    """transformers' time_step_rank: "auto" is ceil(hidden / 16)."""
    return math.ceil(hidden / 16) if rank == "auto" else int(rank)

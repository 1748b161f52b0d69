"""Bind windows: which slice of the arena each GPU step binds, and the staging copies that let a
node whose tensors lie far apart run in one slice. Pure math on byte offsets: no GPU, no wgpu.

WebGPU caps one storage binding (``max_storage_buffer_binding_size``: 128 MiB on lavapipe, 2 GiB - 4
on an H100) while the arena may hold several GiB. Every GPU step binds W = min(arena, cap) bytes at
an aligned base (one bind group whose dynamic offset moves the window):

1. A node whose tensors span at most W gets a window covering them all (``cover_base``).
2. Otherwise its biggest *unit* (a tensor, or tensors sharing bytes such as a view and its root)
   anchors the window ("big params anchor": never copied), and every unit left outside is
   *staged*: copied into free bytes inside the window before the op (what it reads) and copied back
   after it (what it writes); the op's lowerer then sees the staged copy through ``ctx.offset``.
   Free bytes are bytes no tensor alive at that node occupies (the memory plan's liveness), so a
   staging copy never overwrites a live tensor (``plan_window``).
3. When no window around the anchor holds enough free bytes (params packed back to back are all
   alive), the compiler inserts a *gap*, a reserved scratch region, at the cut point nearest the
   anchor (``gap_request``, ``shift``) and plans again. The one scratch region at the arena's end
   cannot serve here: a window anchored on a big param at offset 0 never reaches it.

A node whose units together exceed W cannot run even with staging: LimitError naming the node, its
tensors and the limit (``check_fits``), unless the node is a matmul whose f32 weight fits as f16:
then the weight is stored as f16 in the arena (the f16 shadow, ``shadow_needed`` / ``shadow_fits``;
the graph side is shadow.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rlxpy.errors import LimitError
from rlxpy.wgpu_backend.memplan import align_up

MIB = float(1 << 20)


def align_down(value: int, alignment: int) -> int:
    return value // alignment * alignment


@dataclass(frozen=True, order=True)
class Region:
    """A byte range [offset, offset + size) of the arena."""

    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Access:
    """One tensor a node reads or writes: its node id, byte range and whether the node writes it."""

    id: int
    offset: int
    size: int
    written: bool = False
    name: str = ""


@dataclass(frozen=True)
class Unit:
    """A node's tensors whose byte ranges overlap, merged: they are staged (or not) as a whole."""

    offset: int
    size: int
    parts: tuple[Access, ...]

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def read(self) -> bool:
        """Some part is an input (an in-place op's output is one too): copy it in before the op."""
        return any(not a.written for a in self.parts)

    @property
    def written(self) -> bool:
        return any(a.written for a in self.parts)


@dataclass(frozen=True)
class Staging:
    """``unit`` lives at ``slot`` (a byte offset inside the window) while the node runs."""

    unit: Unit
    slot: int


@dataclass(frozen=True)
class WindowPlan:
    """What one node binds: the window [base, base + size), its staged units, and free bytes inside
    the window that the lowerer may use as scratch (``ctx.scratch``)."""

    base: int
    size: int
    staged: tuple[Staging, ...] = ()
    scratch: tuple[int, int] = (0, 0)

    @property
    def staged_bytes(self) -> int:
        return sum(s.unit.size for s in self.staged)

    def relocations(self) -> dict[int, int]:
        """node id -> byte offset of its staged copy, for every tensor of every staged unit."""
        moved = {}
        for staging in self.staged:
            for part in staging.unit.parts:
                moved[part.id] = staging.slot + part.offset - staging.unit.offset
        return moved


class NoRoom(LimitError):
    """No window around any anchor has free bytes for the staged units; the compiler then asks for
    a gap near ``anchor`` (``gap_request``) and plans again."""

    def __init__(self, message: str, units: Sequence[Unit]) -> None:
        super().__init__(message)
        self.units = tuple(units)


# -- basic window math ------------------------------------------------------------------------------
def window_size(arena_size: int, cap: int, alignment: int) -> int:
    """W: the binding size every step uses, min(arena, cap) rounded down to the alignment."""
    limit = align_down(cap, alignment)
    if limit <= 0:
        raise LimitError(f"the storage binding cap ({cap} B) is below the offset alignment ({alignment} B): "
                         "no window can be bound (raise RLX_WGPU_MAX_BINDING)")
    return min(align_up(arena_size, alignment), limit)


def covers(base: int, window: int, offset: int, size: int) -> bool:
    """Is [offset, offset + size) inside the window [base, base + window)?"""
    return base <= offset and offset + size <= base + window


def cover_base(lo: int, hi: int, arena_size: int, window: int, alignment: int) -> int | None:
    """The aligned base of a window covering [lo, hi) that stays inside the arena, or None.

    ``arena_size`` and ``window`` are multiples of ``alignment`` (so is the last base)."""
    base = min(align_down(lo, alignment), arena_size - window)
    if base < 0 or base > lo or base + window < hi:
        return None
    return base


def merge_units(accesses: Iterable[Access]) -> list[Unit]:
    """Group a node's tensors into units: overlapping byte ranges (views, in-place outputs) merge."""
    units: list[Unit] = []
    for access in sorted(accesses, key=lambda a: (a.offset, -a.size, a.id)):
        last = units[-1] if units else None
        if last is not None and (access.offset < last.end or (access.offset == last.offset)):
            end = max(last.end, access.offset + access.size)
            units[-1] = Unit(last.offset, end - last.offset, (*last.parts, access))
        else:
            units.append(Unit(access.offset, access.size, (access,)))
    return units


def describe_units(units: Sequence[Unit]) -> str:
    return ", ".join(f"{p.name or p.id} {p.size / MIB:.3f} MiB" for u in units for p in u.parts)


def check_fits(units: Sequence[Unit], window: int, alignment: int, what: str) -> None:
    """LimitError when the units could not share one window even with every one but one staged."""
    need = sum(align_up(u.size, alignment) for u in units)
    if need > window:
        raise LimitError(f"{what}: its tensors need {need / MIB:.3f} MiB in one binding "
                         f"({describe_units(units)}) but one binding sees at most {window / MIB:.3f} MiB "
                         "(max_storage_buffer_binding_size or RLX_WGPU_MAX_BINDING); even staged copies "
                         "cannot share one window. Split the op or raise the cap.")


# -- liveness: which bytes are free while a node runs ------------------------------------------------
class Liveness:
    """Arena buffers with their lifetimes (birth and death node ids, inclusive); vectorised queries."""

    def __init__(self, buffers: Iterable[tuple[int, int, int, int]]) -> None:
        rows = np.array(list(buffers) or [(0, 0, 1, 0)], dtype=np.int64).reshape(-1, 4)
        self.start = rows[:, 0]
        self.end = rows[:, 0] + rows[:, 1]
        self.birth = rows[:, 2]
        self.death = rows[:, 3]

    def busy(self, step: int, lo: int, hi: int) -> list[Region]:
        """Merged ranges inside [lo, hi) held by a buffer alive at ``step``."""
        mask = ((self.birth <= step) & (self.death >= step) & (self.start < hi) & (self.end > lo)
                & (self.end > self.start))
        if not mask.any():
            return []
        starts = np.maximum(self.start[mask], lo)
        order = np.argsort(starts, kind="stable")
        starts, reach = starts[order], np.maximum.accumulate(np.minimum(self.end[mask], hi)[order])
        breaks = np.flatnonzero(starts[1:] > reach[:-1]) + 1  # a range that starts past all before it
        firsts = np.concatenate(([0], breaks))
        lasts = np.concatenate((breaks - 1, [len(starts) - 1]))
        return [Region(int(s), int(e - s)) for s, e in zip(starts[firsts], reach[lasts])]

    def free(self, step: int, lo: int, hi: int, alignment: int) -> list[Region]:
        """Free ranges inside [lo, hi) at ``step``, each starting on the alignment."""
        return complement(self.busy(step, lo, hi), lo, hi, alignment)


def complement(busy: Sequence[Region], lo: int, hi: int, alignment: int) -> list[Region]:
    """[lo, hi) minus the sorted, disjoint ``busy`` ranges; pieces start aligned, empty ones dropped."""
    pieces = []
    cursor = lo
    for region in [*busy, Region(hi, 0)]:
        start = align_up(cursor, alignment)
        stop = min(region.offset, hi)
        if stop > start:
            pieces.append(Region(start, stop - start))
        cursor = max(cursor, region.end)
    return pieces


def subtract(regions: Sequence[Region], taken: Iterable[Region], alignment: int) -> list[Region]:
    """Free ``regions`` minus ``taken`` ranges (which may overlap them anywhere)."""
    out: list[Region] = []
    taken = sorted(t for t in taken if t.size > 0)
    for region in regions:
        inside = [Region(max(t.offset, region.offset), min(t.end, region.end) - max(t.offset, region.offset))
                  for t in taken if t.offset < region.end and t.end > region.offset]
        out.extend(complement(inside, region.offset, region.end, alignment))
    return out


# -- staging --------------------------------------------------------------------------------------
def pack(units: Sequence[Unit], regions: Sequence[Region], alignment: int
         ) -> tuple[dict[int, int], list[Region]] | None:
    """First-fit decreasing of ``units`` into ``regions``: ({unit index: slot}, what is left), or None."""
    cursors = [[align_up(r.offset, alignment), r.end] for r in regions]
    slots: dict[int, int] = {}
    for index in sorted(range(len(units)), key=lambda i: (-units[i].size, units[i].offset)):
        need = align_up(units[index].size, alignment)
        for cursor in cursors:
            if cursor[0] + need <= cursor[1]:
                slots[index] = cursor[0]
                cursor[0] = align_up(cursor[0] + need, alignment)
                break
        else:
            return None
    left = [Region(start, end - start) for start, end in cursors if end > start]
    return slots, left


def _largest(regions: Sequence[Region], fallback: int) -> tuple[int, int]:
    best = max(regions, key=lambda r: (r.size, -r.offset), default=None)
    return (best.offset, best.size) if best is not None and best.size > 0 else (fallback, 0)


def plan_window(units: Sequence[Unit], arena_size: int, window: int, alignment: int,
                free_between: Callable[[int, int], list[Region]], what: str = "node") -> WindowPlan:
    """The window (and staging) for one node's ``units``.

    ``free_between(lo, hi)`` lists the bytes of [lo, hi) that hold no tensor alive at this node
    (aligned starts). Prefers no staging; else, anchored on the biggest unit (each of them on a
    tie), the candidate base staging the fewest bytes. Raises NoRoom when nothing fits."""
    check_fits(units, window, alignment, what)
    lo = min(u.offset for u in units)
    hi = max(u.end for u in units)
    base = cover_base(lo, hi, arena_size, window, alignment)
    if base is not None:
        return WindowPlan(base, window)
    own = [Region(u.offset, u.size) for u in units]
    best: WindowPlan | None = None
    biggest = max(u.size for u in units)
    # the biggest unit anchors (a big param is never copied: a gap beside it is cheaper every run)
    for anchor in [u for u in units if u.size == biggest]:
        plan = _best_around(anchor, units, own, arena_size, window, alignment, free_between)
        if plan is not None and (best is None or plan.staged_bytes < best.staged_bytes):
            best = plan
    if best is None:
        raise NoRoom(f"{what}: its tensors span {(hi - lo) / MIB:.3f} MiB ({describe_units(units)}), more "
                     f"than one {window / MIB:.3f} MiB binding, and no window around them has free bytes to "
                     "stage the rest", units)
    return best


def _best_around(anchor: Unit, units: Sequence[Unit], own: Sequence[Region], arena_size: int, window: int,
                 alignment: int, free_between: Callable[[int, int], list[Region]]) -> WindowPlan | None:
    first = max(0, align_up(anchor.end - window, alignment))
    last = min(align_down(anchor.offset, alignment), arena_size - window)
    if first > last:
        return None
    free = subtract(free_between(first, last + window), own, alignment)
    candidates = {first, last}
    for start, end in [(u.offset, u.end) for u in units] + [(r.offset, r.end) for r in free]:
        candidates.add(align_down(start, alignment))
        candidates.add(align_up(end - window, alignment))
    # group bases by which units they cover: the fewest staged bytes first, then try each base
    groups: dict[tuple[int, ...], list[int]] = {}
    for base in sorted(min(max(c, first), last) for c in candidates):
        outside = tuple(i for i, u in enumerate(units) if not covers(base, window, u.offset, u.size))
        groups.setdefault(outside, []).append(base)
    for outside in sorted(groups, key=lambda o: (sum(units[i].size for i in o), len(o))):
        staged_units = [units[i] for i in outside]
        for base in groups[outside]:
            inside = [Region(max(r.offset, base), min(r.end, base + window) - max(r.offset, base))
                      for r in free if r.offset < base + window and r.end > base]
            packed = pack(staged_units, inside, alignment)
            if packed is None:
                continue
            slots, left = packed
            staged = tuple(Staging(staged_units[i], slots[i]) for i in range(len(staged_units)))
            return WindowPlan(base, window, staged, _largest(left, base))
    return None


def in_window_scratch(plan: WindowPlan, free: Sequence[Region], global_scratch: tuple[int, int]
                      ) -> tuple[int, int]:
    """Scratch for a node that needs no staging: the arena's scratch region when the window holds
    it, else the largest free range inside the window (size 0 when there is none)."""
    if covers(plan.base, plan.size, global_scratch[0], global_scratch[1]):
        return global_scratch
    return _largest(free, plan.base)


# -- gaps: scratch regions placed near the windows that need them ---------------------------------
def cut_points(spans: Iterable[tuple[int, int]]) -> list[int]:
    """Offsets no span strictly contains: where a gap can be inserted without splitting a tensor."""
    spans = sorted((s, e) for s, e in spans if e > s)
    starts = [s for s, _ in spans]
    prefix_end = []
    reach = 0
    for _, end in spans:
        reach = max(reach, end)
        prefix_end.append(reach)
    points = sorted({0, *starts, *(e for _, e in spans)})
    cuts = []
    for x in points:
        before = bisect.bisect_left(starts, x)  # spans starting strictly before x
        if before == 0 or prefix_end[before - 1] <= x:
            cuts.append(x)
    return cuts


def gap_request(units: Sequence[Unit], cuts: Sequence[int], window: int, alignment: int, what: str
                ) -> tuple[int, int]:
    """(cut, size) of a gap that lets ``units`` run: sized for every unit but the biggest, at the cut
    nearest the biggest unit such that the unit and the gap fit one window together."""
    anchor = max(units, key=lambda u: (u.size, -u.offset))
    rest = sum(align_up(u.size, alignment) for u in units if u is not anchor)
    size = align_up(max(rest, alignment), alignment)
    best: tuple[int, int] | None = None
    # the nearest aligned cut on each side: a farther one only makes the reach longer
    after = [c for c in cuts[bisect.bisect_left(cuts, anchor.end):] if c % alignment == 0][:1]
    before = [c for c in reversed(cuts[: bisect.bisect_right(cuts, anchor.offset)]) if c % alignment == 0][:1]
    for cut in before + after:
        if cut >= anchor.end:  # gap after the anchor: anchor start .. gap end in one window
            reach, distance = cut + size - align_down(anchor.offset, alignment), cut - anchor.end
        else:  # gap before it: the anchor moves up by the gap
            reach, distance = anchor.end + size - cut, anchor.offset - cut
        if reach <= window and (best is None or distance < best[0]):
            best = (distance, cut)
    if best is None:
        raise LimitError(f"{what}: its tensors ({describe_units(units)}) do not fit one {window / MIB:.3f} "
                         "MiB binding and no cut point of the arena lies close enough to its largest tensor "
                         f"to place {size / MIB:.3f} MiB of staging space beside it")
    return best[1], size


def shift(offset: int, gaps: Sequence[tuple[int, int]]) -> int:
    """Where byte ``offset`` moves once ``gaps`` (cut, size) are inserted: past every gap at or before it."""
    return offset + sum(size for cut, size in gaps if cut <= offset)


# -- copies ------------------------------------------------------------------------------------------
def copy_window(src: int, dst: int, nbytes: int, arena_size: int, window: int, alignment: int) -> int | None:
    """Base of a window covering both ends of a copy (one elementwise_copy_words dispatch), or None: then the
    copy goes through a transfer buffer (two copy_buffer_to_buffer hops)."""
    return cover_base(min(src, dst), max(src, dst) + nbytes, arena_size, window, alignment)


# -- f16 shadow ------------------------------------------------------------------------------------
def f16_bytes(f32_bytes: int) -> int:
    """Arena bytes of the f16 copy of an f32 tensor: half, padded to a whole word."""
    return align_up(f32_bytes // 2, 4)


def binding_need(sizes: Iterable[int], alignment: int) -> int:
    """Bytes a node's distinct tensors take in one window, each aligned as ``check_fits`` counts them."""
    return sum(align_up(size, alignment) for size in sizes)


def shadow_needed(f32_bytes: int, others: Iterable[int], cap: int, alignment: int) -> bool:
    """Can a matmul not bind its f32 weight (``f32_bytes``) with its other tensors (``others``) in one
    window, even with staging? Then the weight runs from its f16 copy."""
    return binding_need([f32_bytes, *others], alignment) > align_down(cap, alignment)


def shadow_fits(f32_bytes: int, others: Iterable[int], cap: int, alignment: int) -> bool:
    """Does the f16 copy of the weight fit one window with the matmul's other tensors?"""
    return binding_need([f16_bytes(f32_bytes), *others], alignment) <= align_down(cap, alignment)

"""WGSL decoders of GGML block formats, pasted into the quant_gguf_* kernels via ``{{DECODE}}``.

Every format is cut into *units* of 32 consecutive elements of a weight row; a unit splits into
two halves of 16 (the smallest K-quant scale group) and eight chunks of 4 elements. Each type
supplies two functions over the arena window ``buf`` (u32 words; ``rb`` = byte offset of the
row, ``u`` = unit index in the row):

* ``q_scale(rb, u, hf) -> vec2<f32>``: (scale, offset) of half ``hf`` of unit ``u``;
* ``q_chunk(rb, u, c) -> vec4<f32>``: the integer quants of elements ``4c .. 4c+3`` of unit ``u``,

so that ``value = scale * q (+ offset when HAS_MIN)``: the same f32 operations, in the same
order, as gguf-py's ``quants.dequantize_blocks`` (llama.cpp's ``dequantize_row_*``). Every
product ``scale * q`` is exact in f32 (an f16 scale times at most 13 more bits), so a fused
multiply-add gives the same bits as the separate product and sum: dequantised values match
gguf-py bit for bit. Float types (F32/F16/BF16) mask elements past ``p.k`` (rows need not be a
multiple of 32 there), which is why every kernel's params carry a field ``k``.

Blocks are not 4-byte aligned in general (Q4_0 = 18 bytes, Q8_0 = 34, Q3_K = 110, Q6_K = 210):
``ld_word`` reads 4 bytes at any byte offset from the two words that contain them.
"""

from __future__ import annotations

#: Byte loads from the u32 arena, f16/bf16 decoding, byte unpacking, and ``dq4`` (exact values).
HELPERS = """
fn ld_byte(b: u32) -> u32 { return (buf[b >> 2u] >> ((b & 3u) << 3u)) & 0xffu; }
// two bytes at an even byte offset (GGML blocks are at least 2-byte aligned)
fn ld_half(b: u32) -> u32 { return (buf[b >> 2u] >> ((b & 2u) << 3u)) & 0xffffu; }
// four bytes at any byte offset, little-endian: a funnel shift of the two words holding them
// (branch-free: lanes of one warp often disagree on alignment, e.g. odd and even Q8_0 blocks)
fn ld_word(b: u32) -> u32 {
    let i = b >> 2u;
    let s = (b & 3u) << 3u;
    let lo = buf[i];
    return select((lo >> s) | (buf[i + 1u] << (32u - s)), lo, s == 0u);
}
// IEEE half -> f32 by bit surgery (exact, subnormals included; unpack2x16float may flush them)
fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let ex = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    if (ex == 0u) {
        return bitcast<f32>(bitcast<u32>(f32(man) * 5.9604644775390625e-8) | sign);
    }
    if (ex == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (man << 13u));
    }
    return bitcast<f32>(sign | ((ex + 112u) << 23u) | (man << 13u));
}
fn bf16_to_f32(h: u32) -> f32 { return bitcast<f32>(h << 16u); }
// the four bytes of w as unsigned / signed integers in f32, exactly: OR-ing a byte into the
// mantissa of 2^23 and subtracting 2^23 avoids integer->float conversions (quarter rate on GPUs)
fn bytes4(w: u32) -> vec4<f32> {
    let v = (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - vec4<f32>(8388608.0);
}
fn sbytes4(w: u32) -> vec4<f32> {
    let v = (vec4<u32>(w ^ 0x80808080u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);  // s + 128
    return bitcast<vec4<f32>>(v | vec4<u32>(0x4b000000u)) - vec4<f32>(8388736.0);
}
"""

#: The 32 quants of a Q4_x/Q5_x block from its four qs words (element j: low nibble of byte j,
#: then high nibbles for j >= 16) and the 5th bits ``qh`` (0 for Q4), minus ``offset``.
NIBBLE_UNIT = """
// the low 4 bits of qh moved to bit 4 of each byte (the 5th bit of 4 consecutive elements)
fn qh_bits(qh: u32) -> u32 {
    return ((qh & 1u) << 4u) | ((qh & 2u) << 11u) | ((qh & 4u) << 18u) | ((qh & 8u) << 25u);
}
fn nibble_unit(w0: u32, w1: u32, w2: u32, w3: u32, qh: u32, offset: vec4<f32>) -> array<vec4<f32>, 8> {
    let m = 0x0f0f0f0fu;
    return array<vec4<f32>, 8>(
        bytes4((w0 & m) | qh_bits(qh)) - offset,
        bytes4((w1 & m) | qh_bits(qh >> 4u)) - offset,
        bytes4((w2 & m) | qh_bits(qh >> 8u)) - offset,
        bytes4((w3 & m) | qh_bits(qh >> 12u)) - offset,
        bytes4(((w0 >> 4u) & m) | qh_bits(qh >> 16u)) - offset,
        bytes4(((w1 >> 4u) & m) | qh_bits(qh >> 20u)) - offset,
        bytes4(((w2 >> 4u) & m) | qh_bits(qh >> 24u)) - offset,
        bytes4(((w3 >> 4u) & m) | qh_bits(qh >> 28u)) - offset);
}
"""
#: ``q_unit`` for types whose chunks share no words: the eight chunks, one after another.
DEFAULT_Q_UNIT = """
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(q_chunk(rb, u, 0u), q_chunk(rb, u, 1u), q_chunk(rb, u, 2u),
                               q_chunk(rb, u, 3u), q_chunk(rb, u, 4u), q_chunk(rb, u, 5u),
                               q_chunk(rb, u, 6u), q_chunk(rb, u, 7u));
}
"""
#: Types whose two unit halves share one scale (the GEMV then decodes it once per unit).
SCALE_PER_UNIT = frozenset({"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "F32", "F16", "BF16"})

#: Exact dequantised values of elements ``e .. e+3`` (``e`` a multiple of 4) of the row at ``rb``.
DQ4 = """
fn dq4(rb: u32, e: u32) -> vec4<f32> {
    let u = e >> 5u;
    let c = (e >> 2u) & 7u;
    let q = q_chunk(rb, u, c);
    if (IS_FLOAT) {
        return q;
    }
    let sm = q_scale(rb, u, c >> 2u);
    var v = sm.x * q;
    if (HAS_MIN) {
        v = v + sm.y;
    }
    return v;
}
"""

_FLOAT_TAIL = """
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> { return vec2<f32>(1.0, 0.0); }
"""


def _float_type(load: str) -> str:
    """F32/F16/BF16 rows: ``load`` sets ``v`` from element index ``e`` (row-relative)."""
    return f"""
const IS_FLOAT: bool = true;
const HAS_MIN: bool = false;
{_FLOAT_TAIL}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {{
    let e = (u << 5u) + (c << 2u);
{load}
    // elements past the row end belong to the next row (or to nothing): zero them
    return select(v, vec4<f32>(0.0), vec4<u32>(e) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(p.k));
}}
"""


DECODERS: dict[str, str] = {
    "F32": _float_type("""
    let i = (rb >> 2u) + e;
    let v = vec4<f32>(bitcast<f32>(buf[i]), bitcast<f32>(buf[i + 1u]), bitcast<f32>(buf[i + 2u]),
                      bitcast<f32>(buf[i + 3u]));"""),
    "F16": _float_type("""
    let a = ld_word(rb + (e << 1u));
    let b = ld_word(rb + (e << 1u) + 4u);
    let v = vec4<f32>(f16_to_f32(a & 0xffffu), f16_to_f32(a >> 16u), f16_to_f32(b & 0xffffu),
                      f16_to_f32(b >> 16u));"""),
    "BF16": _float_type("""
    let a = ld_word(rb + (e << 1u));
    let b = ld_word(rb + (e << 1u) + 4u);
    let v = vec4<f32>(bf16_to_f32(a & 0xffffu), bf16_to_f32(a >> 16u), bf16_to_f32(b & 0xffffu),
                      bf16_to_f32(b >> 16u));"""),
    # d (f16) | qs[16]: element j = nibble (j < 16: low of qs[j], else high of qs[j-16]) - 8
    "Q4_0": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32(ld_half(rb + u * 18u)), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let w = ld_word(rb + u * 18u + 2u + ((c & 3u) << 2u));
    return bytes4((w >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu) - vec4<f32>(8.0);
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let b = rb + u * 18u + 2u;
    return nibble_unit(ld_word(b), ld_word(b + 4u), ld_word(b + 8u), ld_word(b + 12u), 0u, vec4<f32>(8.0));
}
""",
    # d, m (f16) | qs[16]: value = d * nibble + m (20-byte blocks stay word aligned)
    "Q4_1": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let h = buf[(rb + u * 20u) >> 2u];
    return vec2<f32>(f16_to_f32(h & 0xffffu), f16_to_f32(h >> 16u));
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let w = buf[((rb + u * 20u) >> 2u) + 1u + (c & 3u)];
    return bytes4((w >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu);
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let i = ((rb + u * 20u) >> 2u) + 1u;
    return nibble_unit(buf[i], buf[i + 1u], buf[i + 2u], buf[i + 3u], 0u, vec4<f32>(0.0));
}
""",
    # d (f16) | qh (u32: bit j = 5th bit of element j) | qs[16]: value = d * (q5 - 16)
    "Q5_0": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32(ld_half(rb + u * 22u)), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = rb + u * 22u;
    let lo = (ld_word(b + 6u + ((c & 3u) << 2u)) >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu;
    return bytes4(lo | qh_bits(ld_word(b + 2u) >> (c << 2u))) - vec4<f32>(16.0);
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let b = rb + u * 22u;
    return nibble_unit(ld_word(b + 6u), ld_word(b + 10u), ld_word(b + 14u), ld_word(b + 18u), ld_word(b + 2u),
                       vec4<f32>(16.0));
}
""",
    # d, m (f16) | qh (u32) | qs[16]: value = d * q5 + m (24-byte blocks stay word aligned)
    "Q5_1": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let h = buf[(rb + u * 24u) >> 2u];
    return vec2<f32>(f16_to_f32(h & 0xffffu), f16_to_f32(h >> 16u));
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let i = (rb + u * 24u) >> 2u;
    let lo = (buf[i + 2u + (c & 3u)] >> ((c >> 2u) << 2u)) & 0x0f0f0f0fu;
    return bytes4(lo | qh_bits(buf[i + 1u] >> (c << 2u)));
}
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let i = (rb + u * 24u) >> 2u;
    return nibble_unit(buf[i + 2u], buf[i + 3u], buf[i + 4u], buf[i + 5u], buf[i + 1u], vec4<f32>(0.0));
}
""",
    # d (f16) | qs[32] (i8): value = d * q
    "Q8_0": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    return vec2<f32>(f16_to_f32(ld_half(rb + u * 34u)), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    return sbytes4(ld_word(rb + u * 34u + 2u + (c << 2u)));
}
// quant word j of a block at byte 0 mod 4 (a, b: words j, j + 1) or 2 mod 4 (b: word j + 1)
fn q8_word(a: u32, b: u32, odd: bool) -> u32 {
    return select((a >> 16u) | (b << 16u), b, odd);
}
// the 32 quants from the nine words that cover the block (blocks are 2-byte aligned): nine loads
// instead of two per ld_word
fn q_unit(rb: u32, u: u32) -> array<vec4<f32>, 8> {
    let b = rb + u * 34u;
    let i = b >> 2u;
    let odd = (b & 2u) != 0u;
    let w0 = buf[i];
    let w1 = buf[i + 1u];
    let w2 = buf[i + 2u];
    let w3 = buf[i + 3u];
    let w4 = buf[i + 4u];
    let w5 = buf[i + 5u];
    let w6 = buf[i + 6u];
    let w7 = buf[i + 7u];
    let w8 = buf[i + 8u];
    return array<vec4<f32>, 8>(sbytes4(q8_word(w0, w1, odd)), sbytes4(q8_word(w1, w2, odd)),
                               sbytes4(q8_word(w2, w3, odd)), sbytes4(q8_word(w3, w4, odd)),
                               sbytes4(q8_word(w4, w5, odd)), sbytes4(q8_word(w5, w6, odd)),
                               sbytes4(q8_word(w6, w7, odd)), sbytes4(q8_word(w7, w8, odd)));
}
""",
    # scales[16] (lo nibble: scale, hi: min, per 16 elements) | qs[64] | d, dmin (f16).
    # Element E = 128h + 32j + l is bits 2j..2j+1 of qs[32h + l]; unit = 4h + j.
    "Q2_K": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = rb + (u >> 3u) * 84u;
    let dd = buf[(b + 80u) >> 2u];
    let sc = ld_byte(b + ((u & 7u) << 1u) + hf);
    return vec2<f32>(f16_to_f32(dd & 0xffffu) * f32(sc & 15u), -(f16_to_f32(dd >> 16u) * f32(sc >> 4u)));
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = rb + (u >> 3u) * 84u;
    let ub = u & 7u;
    let w = buf[(b + 16u + ((ub >> 2u) << 5u) + (c << 2u)) >> 2u];
    return bytes4((w >> ((ub & 3u) << 1u)) & 0x03030303u);
}
""",
    # hmask[32] | qs[64] | scales[12] (16 six-bit scales, -32) | d (f16).
    # Element E = 128h + 32j + l: 2 bits of qs[32h + l] at 2j, minus 4 unless bit (4h + j) of hmask[l].
    "Q3_K": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = rb + (u >> 3u) * 110u;
    let s = ((u & 7u) << 1u) + hf;
    let lo = (ld_byte(b + 96u + (s & 7u)) >> ((s >> 3u) << 2u)) & 15u;
    let hi = (ld_byte(b + 104u + (s & 3u)) >> ((s >> 2u) << 1u)) & 3u;
    return vec2<f32>(f16_to_f32(ld_half(b + 108u)) * f32(i32(lo | (hi << 4u)) - 32), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = rb + (u >> 3u) * 110u;
    let ub = u & 7u;
    let ql = (ld_word(b + 32u + ((ub >> 2u) << 5u) + (c << 2u)) >> ((ub & 3u) << 1u)) & 0x03030303u;
    let hm = (ld_word(b + (c << 2u)) >> ub) & 0x01010101u;
    return bytes4(ql | (hm << 2u)) - vec4<f32>(4.0);
}
""",
    # d, dmin (f16) | scales[12] (8 six-bit scale/min pairs) | qs[128]: sub-block sb of 32 elements
    # is the (sb & 1) nibble of qs[32 * (sb >> 1) ..]; value = d*sc * q - dmin*m.
    "Q4_K": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = rb + (u >> 3u) * 144u;
    return kquant_scale_min(b, u & 7u);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = rb + (u >> 3u) * 144u;
    let sb = u & 7u;
    let w = buf[(b + 16u + ((sb >> 1u) << 5u) + (c << 2u)) >> 2u];
    return bytes4((w >> ((sb & 1u) << 2u)) & 0x0f0f0f0fu);
}
""",
    # as Q4_K plus qh[32] before qs: bit sb of qh[l] is the 5th bit of element l of sub-block sb
    "Q5_K": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = true;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = rb + (u >> 3u) * 176u;
    return kquant_scale_min(b, u & 7u);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = rb + (u >> 3u) * 176u;
    let sb = u & 7u;
    let lo = (buf[(b + 48u + ((sb >> 1u) << 5u) + (c << 2u)) >> 2u] >> ((sb & 1u) << 2u)) & 0x0f0f0f0fu;
    let hi = (buf[(b + 16u + (c << 2u)) >> 2u] >> sb) & 0x01010101u;
    return bytes4(lo | (hi << 4u));
}
""",
    # ql[128] | qh[64] | scales[16] (i8, per 16 elements) | d (f16). Element 128h + 32q + l:
    # nibble (q >> 1) of ql[64h + 32(q & 1) + l] | bits 2q.. of qh[32h + l] << 4, minus 32.
    "Q6_K": """
const IS_FLOAT: bool = false;
const HAS_MIN: bool = false;
fn q_scale(rb: u32, u: u32, hf: u32) -> vec2<f32> {
    let b = rb + (u >> 3u) * 210u;
    let sc = bitcast<i32>(ld_byte(b + 192u + ((u & 7u) << 1u) + hf) << 24u) >> 24u;
    return vec2<f32>(f16_to_f32(ld_half(b + 208u)) * f32(sc), 0.0);
}
fn q_chunk(rb: u32, u: u32, c: u32) -> vec4<f32> {
    let b = rb + (u >> 3u) * 210u;
    let ub = u & 7u;
    let h = ub >> 2u;
    let q = ub & 3u;
    let lo = (ld_word(b + (h << 6u) + ((q & 1u) << 5u) + (c << 2u)) >> ((q >> 1u) << 2u)) & 0x0f0f0f0fu;
    let hi = (ld_word(b + 128u + (h << 5u) + (c << 2u)) >> (q << 1u)) & 0x03030303u;
    return bytes4(lo | (hi << 4u)) - vec4<f32>(32.0);
}
""",
}

#: Q4_K/Q5_K scale and min of sub-block ``sb`` (llama.cpp's get_scale_min_k4), block at byte ``b``:
#: the 12 scale bytes hold six-bit scales (bytes 0-3 + high bits) and mins (bytes 4-7 + high bits).
KQUANT_SCALE_MIN = """
fn kquant_scale_min(b: u32, sb: u32) -> vec2<f32> {
    let dd = buf[b >> 2u];
    var sc: u32;
    var mn: u32;
    if (sb < 4u) {
        sc = ld_byte(b + 4u + sb) & 63u;
        mn = ld_byte(b + 8u + sb) & 63u;
    } else {
        let packed = ld_byte(b + 8u + sb);
        sc = (packed & 15u) | ((ld_byte(b + sb) >> 2u) & 0x30u);
        mn = (packed >> 4u) | ((ld_byte(b + 4u + sb) >> 2u) & 0x30u);
    }
    return vec2<f32>(f16_to_f32(dd & 0xffffu) * f32(sc), -(f16_to_f32(dd >> 16u) * f32(mn)));
}
"""

GPU_TYPES = frozenset(DECODERS)


def decode_source(qtype: str) -> str:
    """Helpers + the decoder of ``qtype`` + dq4, ready for a kernel's ``{{DECODE}}`` slot."""
    extra = KQUANT_SCALE_MIN if qtype in ("Q4_K", "Q5_K") else ""
    unit = "" if "fn q_unit" in DECODERS[qtype] else DEFAULT_Q_UNIT
    return HELPERS + NIBBLE_UNIT + extra + DECODERS[qtype] + unit + DQ4

// Attention score semantics shared by the attention kernels (#include "attention_mask.wgsl"): needs the
// params fields scale, softcap, window, mask, m_sb/m_sh/m_sq/m_sk, the constant MASK_KIND and the mask's
// loader {{LOAD_MASK}} (common_words). Mask kinds: MaskKind (ir/ops/base.py); the order of scale,
// softcap and mask follows ref_attention (ir/reference/attention.py).
#include "common_words.wgsl"
#include "common_math.wgsl"

fn neg_inf() -> f32 {
    return bitcast<f32>(0xff800000u);
}

// [first, end) of the keys that a block of query rows can see under the causal and sliding-window masks
// (top and bottom: the positions shift + row of its first and last row; other masks: [0, end)). Keys
// outside add exactly 0, unless a row is fully masked (top < 0): that row averages every key, as the
// reference does, so the block then reads them all.
fn visible_keys(top: i32, bottom: i32, end: u32) -> vec2<u32> {
    var first = 0u;
    var last = end;
    if ((MASK_KIND == 1u || MASK_KIND == 3u) && top >= 0) {
        last = min(end, u32(bottom + 1));
        if (MASK_KIND == 3u) {
            first = u32(max(0, top - i32(p.window)));
        }
    }
    return vec2<u32>(first, last);
}

fn mask_value(i: u32) -> f32 {
    return f32({{LOAD_MASK}}(i));
}

// scale, softcap, then the mask, as the reference does (ref_attention in ir/reference/attention.py)
fn masked_score(dot: f32, b: u32, h: u32, i: u32, j: u32, pos: i32) -> f32 {
    var s = dot * p.scale;
    if (p.softcap != 0.0) {
        s = p.softcap * tanh_safe(s / p.softcap);
    }
    if (MASK_KIND == 1u || MASK_KIND == 3u) {
        var keep = i32(j) <= pos;
        if (MASK_KIND == 3u) {
            keep = keep && i32(j) >= pos - i32(p.window);
        }
        s = select(-3.4e38, s, keep);
    } else if (MASK_KIND == 2u) {
        let keep = mask_value(p.mask + b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk);
        s = select(s, -1e9, keep < 0.5);
    } else if (MASK_KIND == 4u) {
        s = s + mask_value(p.mask + b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk);
    }
    return s;
}

// The Stockham autosort stages over the workgroup memory `sh`: two halves of {{CAP}} points, each
// stage reading one and writing the other (p.per_wg lines of p.len points, natural order in and out).
// Stage s has radix r (4 bits each in radices0/radices1) and span ns (the product of the earlier
// radices): butterfly j of a line reads points j + q * len/r, twists them by w_{ns r}^(q k) with
// k = j mod ns, takes their r-point DFT and writes points (j / ns) * ns * r + k + q * ns. Twiddles are
// entries of the roots table: w_{ns r}^x = roots[x * n_table / (ns r)].
var<workgroup> sh: array<vec2<f32>, {{SLOTS}}>;

fn radix_of(stage: u32) -> u32 {
    if (stage < 8u) {
        return (p.radices0 >> (4u * stage)) & 15u;
    }
    return (p.radices1 >> (4u * (stage - 8u))) & 15u;
}

// Runs every stage on the half starting at `src`; returns the start of the half holding the result.
// v times roots[index] (index 0: v itself, no table read)
fn twist(v: vec2<f32>, index: u32) -> vec2<f32> {
    if (index == 0u) {
        return v;
    }
    return cmul(v, pair(p.table, index));
}

fn run_stages(lane: u32, src: u32) -> u32 {
    var here = src;
    var ns = 1u;
    for (var stage = 0u; stage < p.stages; stage = stage + 1u) {
        let there = {{CAP}}u - here;
        let radix = radix_of(stage);
        let stride = p.len / radix;
        let count = p.per_wg * stride;
        let step = p.n_table / (ns * radix);
        var w: array<vec2<f32>, 7>;  // w_r^q for the radix-3/5/7 DFTs
        for (var q = 0u; q < radix; q = q + 1u) {
            w[q] = pair(p.table, q * (p.n_table / radix));
        }
        // (line, j, k = j mod ns) of butterfly j_all = lane + i * WG, stepped without dividing (stride
        // is a multiple of ns, so k only wraps at ns)
        let line_step = {{WG}}u / stride;
        let j_step = {{WG}}u % stride;
        let k_step = j_step % ns;
        var line = lane / stride;
        var j = lane % stride;
        var k = j % ns;
        for (var j_all = lane; j_all < count; j_all = j_all + {{WG}}u) {
            let start = here + line * p.len + j;
            let out = there + line * p.len + (j - k) * radix + k;  // (j / ns) * ns * radix + k
            if (radix == 4u) {
                let x0 = sh[start];
                let x1 = twist(sh[start + stride], k * step);
                let x2 = twist(sh[start + 2u * stride], 2u * k * step);
                let x3 = twist(sh[start + 3u * stride], 3u * k * step);
                let a = x0 + x2;
                let b = x0 - x2;
                let d = x1 + x3;
                let e = x1 - x3;
                sh[out] = a + d;
                sh[out + ns] = b + mul_neg_i(e);
                sh[out + 2u * ns] = a - d;
                sh[out + 3u * ns] = b + mul_pos_i(e);
            } else if (radix == 2u) {
                let x0 = sh[start];
                let x1 = twist(sh[start + stride], k * step);
                sh[out] = x0 + x1;
                sh[out + ns] = x0 - x1;
            } else {
                var x: array<vec2<f32>, 7>;
                for (var q = 0u; q < radix; q = q + 1u) {
                    x[q] = twist(sh[start + q * stride], q * k * step);
                }
                for (var q = 0u; q < radix; q = q + 1u) {
                    var acc = x[0];
                    for (var m = 1u; m < radix; m = m + 1u) {
                        acc = acc + cmul(x[m], w[(m * q) % radix]);
                    }
                    sh[out + q * ns] = acc;
                }
            }
            line = line + line_step;
            j = j + j_step;
            k = k + k_step;
            if (k >= ns) {
                k = k - ns;
            }
            if (j >= stride) {
                j = j - stride;
                line = line + 1u;
            }
        }
        workgroupBarrier();
        here = there;
        ns = ns * radix;
    }
    return here;
}

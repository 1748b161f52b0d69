// y[b] = act(a[b] @ w[b] + bias): f32 GEMM, one BM x BN output tile per 16 x 16 workgroup, K in steps of BK.
// Split K: grid z = the split, which sums k_len of a's k columns and w's rows (the strides step to its
// chunk) into its own y block, summed by matmul_split_sum; unsplit, k_len = k and z = the batch.
// The sums are the register-tiled core of lowering/matmul_core.py (K_LOOP: thread (tx, ty) owns rows
// ty*4 + 64h + i and cols tx*4 + 64g + j in named vec4 accumulators; the next K step is loaded into
// registers while this one is summed, then stored to the other of two workgroup buffers, one barrier
// per step). A step moves BK*BM/4 vec4s of a and BK*BN/4 of w: thread `flat` moves vec4 number
// flat + 256 r of each (r < the lowerer's counts), held in named registers (sa_r, sw_r) in between. GROUP_ROWS > 0 walks the tiles
// in bands of that many tile rows (column by column within a band) so the workgroups resident at once
// share a's and w's tiles in L2.
// TRANS_A / TRANS_B: a is stored [K, M] / w is stored [N, K] (MatMul's transpose_a / transpose_b), read
// in place (include/matmul_transposed_*): a thread loads 4 rows of a at one k, or 4 k of one w column.
// Bindings: 0 = arena window (vec4 or single words: matmul_access_*), 1 = MatmulTiledParams (element
// offsets, batch strides).
#include "matmul_access_{{ACCESS}}.wgsl"
#include "matmul_transposed_{{ACCESS}}.wgsl"
#include "matmul_tiled_core.wgsl"

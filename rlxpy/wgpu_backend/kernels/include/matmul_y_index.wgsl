// y_index(row, col) of the f32 GEMM kernels (matmul_tiled, matmul_skinny): y[row, col], or with a
// split store (SplitMatMul) columns [0, split1), [split1, split2), [split2, n) as three
// [block_rows, width] blocks one after another (block_rows = the full m, so an active extent does
// not move them); a plain GEMM has split1 = split2 = n. Needs params n, split1, split2, block_rows.
fn y_index(row: u32, col: u32) -> u32 {
    if (col < p.split1) {
        return row * p.split1 + col;
    }
    if (col < p.split2) {
        return p.block_rows * p.split1 + row * (p.split2 - p.split1) + col - p.split1;
    }
    return p.block_rows * p.split2 + row * (p.n - p.split2) + col - p.split2;
}

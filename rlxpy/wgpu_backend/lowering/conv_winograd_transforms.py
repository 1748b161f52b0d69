"""Winograd F(m x m, 3x3) transform matrices (Toom-Cook over chosen points and infinity), computed
exactly in rationals, and the WGSL statements that apply them (written out term by term: the
kernels keep every value in a named register; a dynamically indexed array could live in local memory).

For points a_0 .. a_{n-2} and infinity (n = m + 2): A^T [m, n] evaluates the m outputs from the n
products (``A^T[i][j] = a_j^i``, infinity only in the last row), G [n, 3] interpolates the kernel
(``G[j][k] = a_j^k / prod_{l != j} (a_j - a_l)``, infinity: [0, 0, 1]), and B^T [n, n] is the unique
matrix with ``sum_j A^T[i][j] G[j][k] B^T[j][l] = [l == i + k]`` (so ``A^T ((G g) * (B^T d))`` is the
correlation of d with g), solved here by exact elimination. Each row of B^T is made to start
positive (with its row of G): a sign flip changes no rounding.

Points (f32 error of one 3x3 conv against float64, max |error| / max |y|, C_in 64 / 256 / 512 of
ReLU-like inputs, numpy): F(2x2) over (0, 1, -1): 1.8e-7 to 3.4e-7, as the direct sum (1.6e-7 to
3.3e-7). F(4x4): (0, +-1, +-2) 2.2e-6 to 4.7e-6, (0, +-1, +-1/2) 2.1e-6 to 7.5e-6, (0, +-1, 1/2, -2)
1.3e-6 to 1.9e-6: the mixed points put the smallest entries into the transforms (A^T's row i holds
a^i, so 2 and 1/2 balance), and F(4x4) takes them.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

R = 3  # kernel taps per axis
#: the finite interpolation points of F(m x m, 3x3) by output tile side m
POINTS: dict[int, tuple[Fraction, ...]] = {
    2: (Fraction(0), Fraction(1), Fraction(-1)),
    4: (Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2)),
}

Matrix = list[list[Fraction]]


def _solve(a: Matrix, b: list[Fraction]) -> list[Fraction]:
    """x with a x = b for a square, invertible ``a`` (Gauss-Jordan in rationals)."""
    n = len(a)
    rows = [list(r) + [v] for r, v in zip(a, b, strict=True)]
    for c in range(n):
        pivot = next(r for r in range(c, n) if rows[r][c] != 0)
        rows[c], rows[pivot] = rows[pivot], rows[c]
        rows[c] = [v / rows[c][c] for v in rows[c]]
        for r in range(n):
            if r != c and rows[r][c] != 0:
                rows[r] = [v - rows[r][c] * w for v, w in zip(rows[r], rows[c], strict=True)]
    return [rows[r][n] for r in range(n)]


@cache
def matrices(m: int) -> tuple[Matrix, Matrix, Matrix]:
    """(A^T, G, B^T) of F(m x m, 3x3), exact."""
    pts = POINTS[m]
    n = m + R - 1
    at = [[a ** i for a in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = []
    for j, a in enumerate(pts):
        norm = Fraction(1)
        for other in pts[:j] + pts[j + 1:]:
            norm *= a - other
        g.append([a ** k / norm for k in range(R)])
    g.append([Fraction(0)] * (R - 1) + [Fraction(1)])
    # column l of B^T: the n unknowns B^T[:, l] against the m * R equations; the normal equations
    # of this consistent, full-rank system give the exact solution
    c = [[at[i][j] * g[j][k] for j in range(n)] for i in range(m) for k in range(R)]
    ctc = [[sum(row[p] * row[q] for row in c) for q in range(n)] for p in range(n)]
    cols = []
    for l in range(n):
        rhs = [Fraction(int(l == i + k)) for i in range(m) for k in range(R)]
        cols.append(_solve(ctc, [sum(row[p] * v for row, v in zip(c, rhs, strict=True)) for p in range(n)]))
    bt = [[cols[l][j] for l in range(n)] for j in range(n)]
    for j in range(n):
        if next(v for v in bt[j] if v != 0) < 0:
            bt[j] = [-v for v in bt[j]]
            g[j] = [-v for v in g[j]]
    return at, g, bt


def _combo(coeffs: list[Fraction], names: list[str]) -> str:
    """sum_i coeffs[i] * names[i] as a WGSL f32 expression (zeros left out, +-1 without a product)."""
    terms = []
    for c, name in zip(coeffs, names, strict=True):
        if c == 0:
            continue
        sign = "-" if c < 0 else "+"
        mag = abs(c)
        terms.append((sign, name if mag == 1 else f"{float(mag)!r} * {name}"))
    if not terms:
        return "0.0"
    text = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    return text + "".join(f" {sign} {term}" for sign, term in terms[1:])


def _two_sided(left: Matrix, names: list[list[str]], right: Matrix, mid: str) -> tuple[list[str], list[str]]:
    """Statements of ``left X right^T`` for the named X: the intermediate ``mid{i}_{c} = (left X)[i][c]``
    and the result expressions in row-major order."""
    rows, cols = len(left), len(names[0])
    lines = [f"    let {mid}{i}_{c} = {_combo(left[i], [names[r][c] for r in range(len(names))])};"
             for i in range(rows) for c in range(cols)]
    exprs = [_combo(right[k], [f"{mid}{i}_{c}" for c in range(cols)])
             for i in range(rows) for k in range(len(right))]
    return lines, exprs


def weights_code(m: int) -> str:
    """U[t] = (G g G^T)[t / n][t % n] of the 3x3 kernel at ``src`` to ``first + t * plane``."""
    _, g, _ = matrices(m)
    names = [[f"g{r}_{c}" for c in range(R)] for r in range(R)]
    lines = [f"    let g{r}_{c} = ld_f32(src + {R * r + c}u);" for r in range(R) for c in range(R)]
    mid, exprs = _two_sided(g, names, g, "h")
    return "\n".join(lines + mid + [f"    st_f32(first + {t}u * plane, {e});" for t, e in enumerate(exprs)])


def input_code(m: int) -> str:
    """V[t] = (B^T d B)[t / n][t % n] of the n x n patch from (ih, iw) (zeros outside x) to
    ``first + t * plane``."""
    _, _, bt = matrices(m)
    n = m + R - 1
    names = [[f"d{r}_{c}" for c in range(n)] for r in range(n)]
    lines = [f"    let d{r}_{c} = x_or_zero(base, rows, ih + {r}, iw + {c});"
             for r in range(n) for c in range(n)]
    mid, exprs = _two_sided(bt, names, bt, "e")
    return "\n".join(lines + mid + [f"    st_f32(first + {t}u * plane, {e});" for t, e in enumerate(exprs)])


def output_code(m: int) -> str:
    """The m x m outputs (A^T M A) of the n x n products at ``first + t * plane`` to store_y where every
    product is finite, else the tile's direct sums (store_direct)."""
    at, _, _ = matrices(m)
    n = m + R - 1
    names = [[f"m{r}_{c}" for c in range(n)] for r in range(n)]
    lines = [f"    let m{r}_{c} = ld_f32(first + {n * r + c}u * plane);" for r in range(n) for c in range(n)]
    lines.append("    var worst = magnitude(m0_0);")
    lines += [f"    worst = max(worst, magnitude(m{r}_{c}));" for r in range(n) for c in range(n) if r or c]
    lines += ["    if (worst >= 0x7f800000u) {", "        store_direct(img, co, oh, ow);", "        return;",
              "    }"]
    mid, exprs = _two_sided(at, names, at, "s")
    stores = [f"    store_y(img, co, oh + {t // m}u, ow + {t % m}u, {e});" for t, e in enumerate(exprs)]
    return "\n".join(lines + mid + stores)

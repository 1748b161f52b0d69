// Integer pow by squaring on the compute type T (i32 or u32; WGSL has no integer pow). A negative
// exponent gives the truncated real power like the reference: 1 and -1 stay +-1, others give 0
// (0 ** -k, undefined in integers, gives 0). ``x + 1 == 0`` tests x == -1 without a u32(-1) literal.
fn pow_int(x: T, y: T) -> T {
    var result: T = T(1);
    var base = x;
    var e = y;
    if (e < T(0)) {
        if (x == T(1) || (x + T(1) == T(0) && (e & T(1)) == T(0))) {
            return T(1);
        }
        return select(T(0), x, x + T(1) == T(0));
    }
    while (e > T(0)) {
        if ((e & T(1)) == T(1)) {
            result = result * base;
        }
        base = base * base;
        e = e >> u32(1);
    }
    return result;
}

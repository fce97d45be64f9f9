"""The fragment order of kv-convert 1 (docs/fp8.md, "Conversion in registers"), on a model of the instructions: the
decode KV-cache kernel over an e4m3 cache reads MMA fragments of the 8-bit K and V tiles with ldmatrix (b16 units, so
each register holds four bytes) and converts them in registers. This models ldmatrix's lane mapping (non-transposed and
.trans), mma.sync.m16n8k16's A, B and C fragments (the PTX ISA's layouts) and the kernel's printed choices — Q's A
fragments read at columns 16ks + 4q .. 4q + 3 (loadQPermuted), sm80::widenE4m3x4's byte pairs, widenE4m3x4Trans's
byte permute 0x3120, acc's n8 tiles 2c / 2c + 1 holding a chunk's even / odd columns, and the shuffles that put acc
back in the C layout — and checks S = Q·Kᵀ and O = P·V exactly, with negative controls (no byte permute, Q's columns
from another start). tests/lit/cli-fp8-kvcache-convert.test pins the printed lines this models. No GPU."""

import random
import unittest

D, DV, KEYS = 64, 64, 64


def matrix(rows, cols, rng):
    return [[float(rng.randint(-6, 6)) for _ in range(cols)] for _ in range(rows)]


def matmul(a, b):
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def mma(c, a, b):
    """c[lane][4] += A·B of one m16n8k16: a[lane] = 4 registers of 2 halves, b[lane] = 2 registers of 2 halves."""
    am = [[0.0] * 16 for _ in range(16)]
    bm = [[0.0] * 8 for _ in range(16)]
    for t in range(32):
        g, q = t // 4, t % 4
        for h in range(2):
            am[g][2 * q + h], am[g + 8][2 * q + h] = a[t][0][h], a[t][1][h]
            am[g][2 * q + 8 + h], am[g + 8][2 * q + 8 + h] = a[t][2][h], a[t][3][h]
            bm[2 * q + h][g], bm[2 * q + 8 + h][g] = b[t][0][h], b[t][1][h]
    cm = matmul(am, bm)
    for t in range(32):
        g, q = t // 4, t % 4
        c[t][0] += cm[g][2 * q]
        c[t][1] += cm[g][2 * q + 1]
        c[t][2] += cm[g + 8][2 * q]
        c[t][3] += cm[g + 8][2 * q + 1]


def ldmatrix(rows, trans):
    """One 8x8 matrix of b16 elements over 8 rows of 16 bytes: each lane's register as its four bytes."""
    out = []
    for t in range(32):
        g, q = t // 4, t % 4
        if trans:  # elements (row 2q, column g) and (row 2q + 1, column g)
            out.append([rows[2 * q][2 * g], rows[2 * q][2 * g + 1], rows[2 * q + 1][2 * g], rows[2 * q + 1][2 * g + 1]])
        else:  # row g, elements 2q and 2q + 1
            out.append([rows[g][4 * q + j] for j in range(4)])
    return out


def scores(q, k, q_step):
    """S's C fragments (n8 tiles) as the kernel computes them; q_step: Q's first column for lane q at k16 step ks."""
    s = [[[0.0] * 4 for _ in range(32)] for _ in range(KEYS // 8)]
    for ks in range(D // 16):
        a = []
        for t in range(32):
            g, c = t // 4, q_step(ks, t % 4)
            a.append([[q[g][c], q[g][c + 1]], [q[g + 8][c], q[g + 8][c + 1]],
                      [q[g][c + 2], q[g][c + 3]], [q[g + 8][c + 2], q[g + 8][c + 3]]])
        for nq in range(KEYS // 32):
            for i in range(4):  # ldmatrix.x4: matrix i is n8 tile 4nq + i (keys 32nq + 8i ...), chunk ks
                raw = ldmatrix([[k[32 * nq + 8 * i + r][16 * ks + x] for x in range(16)] for r in range(8)], False)
                mma(s[4 * nq + i], a, [[[x[0], x[1]], [x[2], x[3]]] for x in raw])  # widenE4m3x4
    return s


def output(p, v, permute):
    """acc's C fragments after the P·V steps and the shuffles back to the C layout."""
    acc = [[[0.0] * 4 for _ in range(32)] for _ in range(DV // 8)]
    for k in range(KEYS // 16):
        a = []
        for t in range(32):
            g, c = t // 4, 16 * k + 2 * (t % 4)
            a.append([[p[g][c], p[g][c + 1]], [p[g + 8][c], p[g + 8][c + 1]],
                      [p[g][c + 8], p[g][c + 9]], [p[g + 8][c + 8], p[g + 8][c + 9]]])
        for nc in range(DV // 32):
            # ldmatrix.x4.trans: matrix m holds keys 16k + 8 (m % 2) ..., chunk 2nc + m / 2
            raw = [ldmatrix([[v[16 * k + 8 * (m % 2) + r][16 * (2 * nc + m // 2) + x] for x in range(16)]
                             for r in range(8)], True) for m in range(4)]
            for c in range(2):
                even, odd = [], []
                for t in range(32):
                    x, y = permute(raw[2 * c][t]), permute(raw[2 * c + 1][t])
                    even.append([[x[0], x[1]], [y[0], y[1]]])
                    odd.append([[x[2], x[3]], [y[2], y[3]]])
                mma(acc[4 * nc + 2 * c], a, even)
                mma(acc[4 * nc + 2 * c + 1], a, odd)
    back = [[list(x) for x in tile] for tile in acc]
    for c in range(DV // 16):
        for r in range(2):
            d0, d1 = [acc[2 * c][t][2 * r] for t in range(32)], [acc[2 * c + 1][t][2 * r] for t in range(32)]
            d2, d3 = [acc[2 * c][t][2 * r + 1] for t in range(32)], [acc[2 * c + 1][t][2 * r + 1] for t in range(32)]
            for t in range(32):
                lo = (t & ~3) + (t % 4) // 2
                hi, odd_lane = lo + 2, t & 1
                back[2 * c][t][2 * r] = d2[lo] if odd_lane else d0[lo]
                back[2 * c][t][2 * r + 1] = d3[lo] if odd_lane else d1[lo]
                back[2 * c + 1][t][2 * r] = d2[hi] if odd_lane else d0[hi]
                back[2 * c + 1][t][2 * r + 1] = d3[hi] if odd_lane else d1[hi]
    return back


def matches(fragments, reference):
    for nt, tile in enumerate(fragments):
        for t in range(32):
            g, q = t // 4, t % 4
            if tile[t] != [reference[g][8 * nt + 2 * q], reference[g][8 * nt + 2 * q + 1],
                           reference[g + 8][8 * nt + 2 * q], reference[g + 8][8 * nt + 2 * q + 1]]:
                return False
    return True


def byte_perm_3120(b):
    """__byte_perm(x, 0u, 0x3120): bytes 0, 2 (column 2g of keys 2q, 2q + 1) low, bytes 1, 3 (column 2g + 1) high."""
    return [b[0], b[2], b[1], b[3]]


class Fp8KvFragments(unittest.TestCase):
    def setUp(self):
        rng = random.Random(42)
        self.q, self.k = matrix(16, D, rng), matrix(KEYS, D, rng)
        self.p, self.v = matrix(16, KEYS, rng), matrix(KEYS, DV, rng)

    def test_scores_from_eight_bit_k_fragments(self):
        s = scores(self.q, self.k, lambda ks, q: 16 * ks + 4 * q)  # loadQPermuted's columns
        self.assertTrue(matches(s, matmul(self.q, [list(r) for r in zip(*self.k)])))

    def test_output_from_eight_bit_v_fragments(self):
        self.assertTrue(matches(output(self.p, self.v, byte_perm_3120), matmul(self.p, self.v)))

    def test_the_model_notices_a_wrong_order(self):
        # Q's columns read from 16ks + 2q instead of 16ks + 4q, or V's bytes unpermuted: both give wrong sums.
        s = scores(self.q, self.k, lambda ks, q: 16 * ks + 2 * q)
        self.assertFalse(matches(s, matmul(self.q, [list(r) for r in zip(*self.k)])))
        self.assertFalse(matches(output(self.p, self.v, lambda b: list(b)), matmul(self.p, self.v)))


if __name__ == "__main__":
    unittest.main()

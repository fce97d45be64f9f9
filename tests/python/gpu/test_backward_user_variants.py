"""The backward of variants written by a user in Python (FlexAttention's use case): the compiler derives the score
hook's derivative by the chain rule over the DSL's ops, and the kernels' gradients must meet FlashAttention's rule
against autograd of the same hook written in torch, in fp32 (reference) and in the low precision (the baseline).
Then one tiny case against flashtile.reference_attention, the fp64 oracle of the same derivative IR (CPU)."""

import pytest
import torch

import flashtile
from flashtile import dsl

ATOL = 1e-4


def wavy():
    # Not a built-in, no derivative written by anyone: tanh and exp of the score, a relative-position term.
    def score(s, c, p):
        return dsl.tanh(s * 0.25) * 4.0 + dsl.exp(-s * s * 0.01) - dsl.to_float(dsl.abs(c.q - c.kv)) * 0.02
    return flashtile.Variant("wavy_relpos").score(score)


def wavy_torch(s, row, col):
    return torch.tanh(s * 0.25) * 4.0 + torch.exp(-s * s * 0.01) - (row - col).abs().float() * 0.02


def prefix_lm(prefix):
    # A mask hook: bidirectional inside the prefix, causal after it (top-left aligned).
    return flashtile.Variant("prefix_lm").param("prefix", prefix, min=0, integer=True).mask(
        lambda c, p: (c.kv <= c.q) | (c.kv < dsl.to_int(p["prefix"])))


def prefix_lm_masked(prefix, row, col):
    return ~((col <= row) | (col < prefix))


def softcap_relpos():
    # A hook over a hook: softcap of a score with a relative-position slope, through a user's division.
    def score(s, c, p):
        biased = s - dsl.to_float(c.q - c.kv) * 0.01
        return dsl.tanh(biased / p["cap"]) * p["cap"]
    return flashtile.Variant("softcap_relpos").param("cap", 20.0, min=0, min_exclusive=True).score(score)


def softcap_relpos_torch(s, row, col, cap=20.0):
    return torch.tanh((s - (row - col).float() * 0.01) / cap) * cap


CASES = {
    "wavy_relpos": (wavy, None, lambda s, r, c: wavy_torch(s, r, c), None, 2.0),
    "prefix_lm": (lambda: prefix_lm(70), {"prefix": 70}, None, lambda r, c: prefix_lm_masked(70, r, c), 2.0),
    "softcap_relpos": (softcap_relpos, None, softcap_relpos_torch, None, 3.0),  # 3x: FlashAttention's softcap rule
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 192, 192, 4, 4, 64), (1, 113, 203, 6, 2, 128)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_user_variant_gradients(case, shape, dtype):
    make, params, score_torch, masked_torch, factor = CASES[case]
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, d = shape
    torch.manual_seed(seqlen_q + d)
    q = torch.randn(batch, seqlen_q, heads_q, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(batch, seqlen_k, heads_kv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(batch, seqlen_k, heads_kv, d, device="cuda", dtype=dtype, requires_grad=True)
    variant = make()
    out = flashtile.attention(q, k, v, variant, params=params)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    # Hooks see the raw query and key positions (top-left), as the DSL's c.q and c.kv.
    row = torch.arange(seqlen_q, device="cuda")[:, None]
    col = torch.arange(seqlen_k, device="cuda")[None, :]

    def ref(upcast):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        qq, kk, vv = (t.float() if upcast else t for t in leaves)
        group = heads_q // heads_kv
        kk, vv = kk.repeat_interleave(group, dim=2), vv.repeat_interleave(group, dim=2)
        s = torch.einsum("bthd,bshd->bhts", qq * d ** -0.5, kk).float()
        if score_torch is not None:
            s = score_torch(s, row, col)
        if masked_torch is not None:
            s = s.masked_fill(masked_torch(row, col), float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        o = torch.einsum("bhts,bshd->bthd", p.to(vv.dtype), vv)
        return torch.autograd.grad(o, leaves, grad_out)

    ref32, lowp = ref(True), ref(False)
    for label, g, r, l in zip(("dq", "dk", "dv"), got, ref32, lowp):
        assert not torch.isnan(g).any(), f"{label} has NaN"
        err = (g.float() - r.float()).abs().max().item()
        err_lowp = (l.float() - r.float()).abs().max().item()
        assert err <= factor * err_lowp + ATOL, f"{label}: max error {err} > {factor} x {err_lowp} (+{ATOL})"


def test_kernels_agree_with_the_fp64_oracle_of_the_same_derivative():
    """The GPU kernels and the fp64 CPU oracle (reference_attention) run the same derivative IR: on a tiny problem
    their gradients agree within the low precision's rounding."""
    torch.manual_seed(3)
    variant = softcap_relpos()
    q, k, v = (torch.randn(1, 40, 2, 64, dtype=torch.float64) for _ in range(3))
    grad_out = torch.randn(1, 40, 2, 64, dtype=torch.float64)
    exact = [t.clone().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(flashtile.reference_attention(*exact, variant), exact, grad_out)
    low = [t.to("cuda", torch.bfloat16).requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(flashtile.attention(*low, variant), low, grad_out.to("cuda", torch.bfloat16))
    for label, g, w in zip(("dq", "dk", "dv"), got, want):
        scale = w.abs().max().item()
        err = (g.double().cpu() - w).abs().max().item()
        assert err <= 0.05 * scale + 1e-3, f"{label}: max error {err} against the fp64 oracle (max |grad| {scale})"

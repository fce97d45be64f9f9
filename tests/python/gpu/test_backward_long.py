"""The backward at long sequences (32k and 64k keys): dQ, dK, dV against an fp32 reference evaluated in chunks of
query rows (each chunk's rows see every key, so its softmax is exact; dK and dV are the sums over the chunks), with
FlashAttention's rule against the same chunked reference in the low precision."""

import pytest
import torch

import flashtile

ATOL = 1e-4


def chunked_grads(q, k, v, grad_out, causal, upcast, rows=4096):
    """Gradients of attention(q, k, v) (batch 1, flash-attn layout, bottom-right causal) by autograd over chunks."""
    seqlen_q, seqlen_k, d = q.shape[1], k.shape[1], q.shape[-1]
    kk = k.detach().clone().requires_grad_()
    vv = v.detach().clone().requires_grad_()
    dq = torch.empty_like(q, dtype=torch.float32)
    dk = torch.zeros_like(k, dtype=torch.float32)
    dv = torch.zeros_like(v, dtype=torch.float32)
    col = torch.arange(seqlen_k, device=q.device)[None, :]
    for start in range(0, seqlen_q, rows):
        qc = q[:, start:start + rows].detach().clone().requires_grad_()
        a, b, c = (t.float() if upcast else t for t in (qc, kk, vv))
        s = torch.einsum("bthd,bshd->bhts", a * d ** -0.5, b).float()
        if causal:
            row = torch.arange(start, start + qc.shape[1], device=q.device)[:, None] + seqlen_k - seqlen_q
            s = s.masked_fill(col > row, float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        o = torch.einsum("bhts,bshd->bthd", p.to(c.dtype), c)
        gq, gk, gv = torch.autograd.grad(o, (qc, kk, vv), grad_out[:, start:start + rows])
        dq[:, start:start + rows] = gq.float()
        dk += gk.float()
        dv += gv.float()
    return dq, dk, dv


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seqlen", [32768, 65536])
def test_backward_at_long_sequences(seqlen, causal):
    torch.manual_seed(seqlen + causal)
    heads, d = 2, 64
    q, k, v = (torch.randn(1, seqlen, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    out = flashtile.flash_attn_func(q, k, v, causal=causal)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    ref = chunked_grads(q, k, v, grad_out, causal, upcast=True)
    lowp = chunked_grads(q, k, v, grad_out, causal, upcast=False)
    for label, g, r, l in zip(("dq", "dk", "dv"), got, ref, lowp):
        assert not torch.isnan(g).any(), f"{label} has NaN"
        err = (g.float() - r).abs().max().item()
        err_lowp = (l - r).abs().max().item()
        assert err <= 2 * err_lowp + ATOL, f"{label}: max error {err} > 2 x {err_lowp} (+{ATOL})"

"""The backward with the layouts and autograd patterns training code produces: Q, K, V as strided views of one packed
QKV projection, a non-contiguous gradient of the output, only some inputs requiring gradients, a head dim the
kernels run zero-padded (80 -> 96), and a second backward through create_graph, which flash-attn does not support
either (an error, never a silent wrong answer)."""

import pytest
import torch

import flashtile

ATOL = 1e-4


def reference(q, k, v, causal, upcast):
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    d = q.shape[-1]
    s = torch.einsum("bthd,bshd->bhts", q * d ** -0.5, k).float()
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        row = torch.arange(sq, device=q.device)[:, None] + sk - sq
        s = s.masked_fill(torch.arange(sk, device=q.device)[None, :] > row, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhts,bshd->bthd", p.to(v.dtype), v)


def check(got, leaves, grad_out, causal):
    for upcast, name in ((True, "ref"), (False, "lowp")):
        copies = [t.detach().clone().requires_grad_() for t in leaves]
        grads = torch.autograd.grad(reference(*copies, causal, upcast), copies, grad_out)
        if upcast:
            ref = grads
        else:
            lowp = grads
    for label, g, r, l in zip(("dq", "dk", "dv"), got, ref, lowp):
        if g is None:
            continue
        err = (g.float() - r.float()).abs().max().item()
        err_lowp = (l.float() - r.float()).abs().max().item()
        assert err <= 2 * err_lowp + ATOL, f"{label}: max error {err} > 2 x {err_lowp}"


@pytest.mark.parametrize("causal", [False, True])
def test_packed_qkv_views_and_a_transposed_grad_out(causal):
    torch.manual_seed(0)
    batch, seqlen, heads, d = 2, 300, 4, 64
    qkv = torch.randn(batch, seqlen, 3, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = qkv.unbind(2)  # strided views: a row of Q is 3·heads·d elements from the next
    out = flashtile.flash_attn_func(q, k, v, causal=causal)
    grad_out = torch.randn(batch, heads, seqlen, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    assert not grad_out.is_contiguous()
    (dqkv,) = torch.autograd.grad(out, (qkv,), grad_out)
    check(dqkv.unbind(2), [t.detach() for t in (q, k, v)], grad_out, causal)


def test_only_some_inputs_require_gradients():
    torch.manual_seed(1)
    q = torch.randn(1, 200, 4, 128, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 250, 2, 128, device="cuda", dtype=torch.float16)
    v = torch.randn(1, 250, 2, 128, device="cuda", dtype=torch.float16, requires_grad=True)
    out = flashtile.flash_attn_func(q, k, v, causal=True)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, v), grad_out)
    assert k.grad is None

    def ref(upcast):
        # GQA: each K/V head serves two query heads; repeat_interleave under autograd sums dV over them.
        qq, vv = q.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
        o = reference(qq, k.repeat_interleave(2, dim=2), vv.repeat_interleave(2, dim=2), True, upcast)
        return torch.autograd.grad(o, (qq, vv), grad_out)

    for label, g, r, l in zip(("dq", "dv"), got, ref(True), ref(False)):
        err = (g.float() - r.float()).abs().max().item()
        err_lowp = (l.float() - r.float()).abs().max().item()
        assert err <= 2 * err_lowp + ATOL, f"{label}: max error {err} > 2 x {err_lowp}"


def test_a_head_dim_run_zero_padded():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 130, 3, 80, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flashtile.flash_attn_func(q, k, v, causal=True)
    assert out.shape[-1] == 80
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    assert all(g.shape == t.shape for g, t in zip(got, (q, k, v)))
    check(got, [t.detach() for t in (q, k, v)], grad_out, True)


def test_double_backward_is_an_error():
    q, k, v = (torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flashtile.flash_attn_func(q, k, v)
    dq, = torch.autograd.grad(out.sum(), (q,), create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(dq.float().sum(), (q,))

"""The package on a GPU: torch.compile without graph breaks, CUDA graph capture with no host synchronization,
the custom op's registration (opcheck), user variants written in Python against PyTorch references, the
backward under torch.compile, and the errors for what flashtile does not do yet."""

import math

import pytest
import torch

import flashtile
from flashtile import dsl
from reference import attention_ref, check_output

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def qkv(batch=2, seqlen_q=256, seqlen_k=256, heads=4, heads_k=2, d=64, dtype=torch.bfloat16):
    torch.random.manual_seed(0)
    make = lambda s, h: torch.randn(batch, s, h, d, device="cuda", dtype=dtype)  # noqa: E731
    return make(seqlen_q, heads), make(seqlen_k, heads_k), make(seqlen_k, heads_k)


def test_compile_fullgraph():
    q, k, v = qkv()
    slopes = torch.rand(4, device="cuda") * 0.3

    def f(q, k, v, slopes):
        a = flashtile.flash_attn_func(q, k, v, causal=True)
        b = flashtile.flash_attn_func(q, k, v, window_size=(32, 8), softcap=20.0, alibi_slopes=slopes)
        return a + b

    expected = f(q, k, v, slopes)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)  # fullgraph: a graph break is an error
    torch.testing.assert_close(compiled(q, k, v, slopes), expected, atol=0, rtol=0)


def test_compile_user_variant():
    variant = flashtile.variants.softcap(15.0)
    variant.id  # registered before compiling: the call is then plain attribute reads
    q, k, v = qkv()

    def f(q, k, v):
        return flashtile.attention(q, k, v, variant, params={"cap": 15.0})

    expected = f(q, k, v)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v), expected, atol=0, rtol=0)


def test_cuda_graph_capture_and_replay():
    q, k, v = qkv(seqlen_q=512, seqlen_k=512)
    static_q, static_k, static_v = q.clone(), k.clone(), v.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up: compiles and loads the kernel
        flashtile.flash_attn_func(static_q, static_k, static_v, causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing call inside raises
    try:
        with torch.cuda.graph(graph):
            static_out = flashtile.flash_attn_func(static_q, static_k, static_v, causal=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for _ in range(2):
        new_q = torch.randn_like(q)
        static_q.copy_(new_q)
        graph.replay()
        torch.cuda.synchronize()
        expected = flashtile.flash_attn_func(new_q, static_k, static_v, causal=True)
        torch.testing.assert_close(static_out, expected, atol=0, rtol=0)


def test_warm_path_matches_the_checked_path():
    # flash_attn_func files each call shape it checked; later calls of that shape (other tensors, same shapes,
    # strides, dtypes, device and flags) take the warm path, which must launch exactly what the checked path does.
    from flashtile import interface

    cases = (dict(causal=True), dict(window_size=(64, 16)), dict(softcap=30.0), dict(causal=True, softmax_scale=0.1))
    for flags in cases:
        q, k, v = qkv(seqlen_q=300, seqlen_k=500)
        flashtile.flash_attn_func(q, k, v, **flags)
        key = interface._dense_key(q, k, v, 0.0, flags.get("softmax_scale"), flags.get("causal", False),
                                   flags.get("window_size", (-1, -1)), flags.get("softcap", 0.0), None, False)
        assert key in interface._prepared, f"{flags}: the call shape was not filed"
        q2, k2, v2 = (torch.randn_like(t) for t in (q, k, v))
        warm, lse, _ = flashtile.flash_attn_func(q2, k2, v2, return_attn_probs=True, **flags)
        checked, checked_lse, _ = interface._flash_attn_func_checked(
            q2, k2, v2, 0.0, flags.get("softmax_scale"), flags.get("causal", False), flags.get("window_size", (-1, -1)),
            flags.get("softcap", 0.0), None, True)
        torch.testing.assert_close(warm, checked, atol=0, rtol=0)
        torch.testing.assert_close(lse, checked_lse, atol=0, rtol=0)
    # A strided view of the same shape is another call shape (its strides differ): checked, then warm.
    q, k, v = qkv(seqlen_q=256, seqlen_k=256, heads=4, heads_k=4)
    qs = torch.randn(2, 256, 8, 64, device="cuda", dtype=torch.bfloat16)[:, :, ::2]
    expected = interface._flash_attn_func_checked(qs, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)
    for _ in range(2):
        torch.testing.assert_close(flashtile.flash_attn_func(qs, k, v, causal=True), expected, atol=0, rtol=0)


def test_current_stream_is_used():
    q, k, v = qkv(seqlen_q=2048, seqlen_k=2048)
    expected = flashtile.flash_attn_func(q, k, v, causal=True)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = flashtile.flash_attn_func(q, k, v, causal=True)
    stream.synchronize()
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_opcheck():
    q, k, v = qkv()
    torch.library.opcheck(torch.ops.flashtile.fwd.default, (q, k, v, None, None, 0, 0, 0.125, "causal", [], [], None, False, False,
                                                           None, None, None, None, None))


def test_backward_under_compile_fullgraph():
    """The backward runs through autograd eagerly and under torch.compile(fullgraph=True), with the same gradients
    (up to the order of dQ's fp32 atomic adds, hence a bf16 tolerance rather than bit equality)."""
    grads = []
    for compiled in (False, True):
        q, k, v = (t.requires_grad_() for t in qkv())
        f = lambda q, k, v: flashtile.flash_attn_func(q, k, v, causal=True)  # noqa: E731
        if compiled:
            torch._dynamo.reset()
            f = torch.compile(f, fullgraph=True)
        f(q, k, v).float().square().sum().backward()
        grads.append((q.grad, k.grad, v.grad))
    for eager, compiled in zip(*grads):
        assert eager is not None and bool(eager.isfinite().all())
        torch.testing.assert_close(compiled, eager)


def test_unsupported_arguments():
    q, k, v = qkv()
    with pytest.raises(NotImplementedError, match="dropout"):
        flashtile.flash_attn_func(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="multiple of nheads_k"):
        flashtile.flash_attn_func(q, k[:, :, :1].expand(-1, -1, 3, -1), v[:, :, :1].expand(-1, -1, 3, -1))


def test_python_variant_relative_bias():
    # A score modifier with a learned per-head bias over clamped distances, written in Python.
    buckets = 64

    def score(s, c, p):
        distance = dsl.minimum(dsl.abs(c.q_aligned() - c.kv), c.kv.literal(buckets - 1))
        return s + p.load("bias", c.h * buckets + distance) * p["gain"]

    variant = flashtile.Variant("rel_bias_test").param("gain", 1.0).input("bias", "f32").score(score)
    q, k, v = qkv(heads=4, heads_k=4)
    bias = torch.randn(4, buckets, device="cuda") * 0.5
    out, lse = flashtile.attention(q, k, v, variant, params={"gain": 0.5}, inputs={"bias": bias}, return_lse=True)
    qf, kf, vf = q.float(), k.float(), v.float()
    scores = torch.einsum("bthd,bshd->bhts", qf, kf) / math.sqrt(q.shape[-1])
    row = torch.arange(q.shape[1], device="cuda")[:, None]
    col = torch.arange(k.shape[1], device="cuda")[None, :]
    distance = (row - col).abs().clamp(max=buckets - 1)
    scores = scores + 0.5 * bias[:, distance][None]
    ref = torch.einsum("bhts,bshd->bthd", torch.softmax(scores, -1), vf)
    assert (out.float() - ref).abs().max().item() < 2e-2
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), atol=1e-3, rtol=1e-4)


def test_python_builtins_run_like_names():
    q, k, v = qkv()
    for name in ("causal", "sliding_window", "softcap_causal"):
        variant = flashtile.variants.by_name(name)
        by_name = flashtile.attention(q, k, v, name)
        by_python = flashtile.attention(q, k, v, variant)
        torch.testing.assert_close(by_python, by_name, atol=0, rtol=0)
    out = flashtile.attention(q, k, v, "sliding_window", params={"left": 16, "right": 4})
    check_output(out, q, k, v, window_size=(16, 4))


def test_document_mask_and_sinks():
    q, k, v = qkv(batch=1, seqlen_q=300, seqlen_k=300, heads=2, heads_k=2)
    starts = torch.tensor([0] * 100 + [100] * 120 + [220] * 80, dtype=torch.int32, device="cuda")[None]
    out = flashtile.attention(q, k, v, "document_mask", inputs={"doc_start": starts})
    for lo, hi in ((0, 100), (100, 220), (220, 300)):
        ref, _ = attention_ref(q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], causal=True)
        assert (out[:, lo:hi].float() - ref.float()).abs().max().item() < 2e-2
    sinks = torch.randn(2, device="cuda")
    out, lse = flashtile.attention(q, k, v, "sinks", inputs=[sinks], return_lse=True)
    _, plain_lse = attention_ref(q, k, v)
    torch.testing.assert_close(lse, torch.logaddexp(plain_lse, sinks[None, :, None]), atol=1e-3, rtol=1e-4)


# The C++ call path (flashtile/_fastpath.cpp) -----------------------------------------------------------------------
# bench/device/python-check.sh runs these tests with FLASHTILE_EXTENSION=wait: the module is built (or loaded from the
# cache) before the first call returns, so every test above ran through it too.

def _extension_expected():
    import os
    import shutil
    import sysconfig

    return (os.environ.get("FLASHTILE_EXTENSION", "auto") != "off" and shutil.which("c++") is not None
            and os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))


def _checked_paths_fail(monkeypatch):
    """Makes the Python paths raise, so that a call that returns was served by the C++ call path."""
    from flashtile import interface

    def python_path(*args, **kwargs):
        raise AssertionError("the call took the Python path")

    monkeypatch.setattr(interface, "_flash_attn_func_checked", python_path)
    monkeypatch.setattr(interface, "_launch_prepared", python_path)
    monkeypatch.setattr(interface, "_attention_call", python_path)


def test_extension_is_built_and_active():
    from flashtile import _extension, interface

    q, k, v = qkv()
    flashtile.flash_attn_func(q, k, v)
    line = _extension.wait(300)
    if not _extension_expected():
        pytest.skip(f"no C++ compiler or Python.h here, or FLASHTILE_EXTENSION=off: {line}")
    assert line.startswith("extension: "), line
    assert interface._fast is not None


def test_extension_warm_calls_match_the_checked_path(monkeypatch):
    from flashtile import _extension, interface

    _extension.wait(300)
    if interface._fast is None:
        pytest.skip(f"the C++ call path is not active: {flashtile.call_path()}")
    variant = flashtile.variants.softcap(20.0)
    cases = [
        ("flash_attn_func", dict(causal=True)), ("flash_attn_func", dict(window_size=(64, 16))),
        ("flash_attn_func", dict(softcap=30.0, softmax_scale=0.1)), ("flash_attn_func", dict(schedule="fa2")),
        ("attention", dict(variant="causal")), ("attention", dict(variant=variant, params={"cap": 20.0})),
        ("attention", dict(variant="sliding_window", params={"left": 32, "right": 8}, softmax_scale=0.2)),
    ]
    for fn_name, flags in cases:
        fn = getattr(flashtile, fn_name)
        q, k, v = qkv(seqlen_q=300, seqlen_k=500)
        fn(q, k, v, **flags)  # checked, filed in both paths
        q2, k2, v2 = (torch.randn_like(t) for t in (q, k, v))
        lse_flag = {"return_attn_probs": True} if fn_name == "flash_attn_func" else {"return_lse": True}
        with monkeypatch.context() as patch:
            patch.setattr(interface, "_fast", None)  # the Python path's result
            expected = fn(q2, k2, v2, **flags, **lse_flag)
        with monkeypatch.context() as patch:
            _checked_paths_fail(patch)
            warm = fn(q2, k2, v2, **flags, **lse_flag)
            plain = fn(q2, k2, v2, **flags)  # without the LSE: the output alone
        torch.testing.assert_close(warm[0], expected[0], atol=0, rtol=0)
        torch.testing.assert_close(warm[1], expected[1], atol=0, rtol=0)
        torch.testing.assert_close(plain, expected[0], atol=0, rtol=0)
        if fn_name == "flash_attn_func":
            assert warm[2] is None and len(warm) == 3
        else:
            assert len(warm) == 2
    # Another value of a number is another call shape: checked (not the filed one), then warm.
    q, k, v = qkv(seqlen_q=300, seqlen_k=500)
    a = flashtile.attention(q, k, v, variant, params={"cap": 20.0})
    b = flashtile.attention(q, k, v, variant, params={"cap": 5.0})
    assert not torch.equal(a, b)


def test_extension_sends_what_it_does_not_know_to_the_checked_path():
    from flashtile import _extension, interface

    _extension.wait(300)
    if interface._fast is None:
        pytest.skip(f"the C++ call path is not active: {flashtile.call_path()}")
    q, k, v = qkv()
    expected = flashtile.flash_attn_func(q, k, v, causal=True)
    flashtile.flash_attn_func(q, k, v, causal=True)
    # The same shape with a flag the checks refuse: their errors, word for word.
    with pytest.raises(NotImplementedError, match="dropout"):
        flashtile.flash_attn_func(q, k, v, dropout_p=0.1, causal=True)
    with pytest.raises(ValueError, match="softmax_scale must be finite"):
        flashtile.flash_attn_func(q, k, v, causal=True, softmax_scale=float("nan"))
    with pytest.raises(ValueError, match="window_size"):
        flashtile.flash_attn_func(q, k, v, causal=True, window_size=(-2, 0))
    with pytest.raises(TypeError, match="strict must be True or False"):
        flashtile.flash_attn_func(q, k, v, causal=True, strict=2)
    # Flags of other types that mean the same (1 for True, a list window) take the checked path, with its result.
    torch.testing.assert_close(flashtile.flash_attn_func(q, k, v, causal=1), expected, atol=0, rtol=0)
    torch.testing.assert_close(flashtile.flash_attn_func(q, k, v, causal=True, window_size=[-1, -1]), expected,
                               atol=0, rtol=0)
    # An unaligned view of the filed shape: copied by the checked path, same result as the aligned copy.
    storage = torch.empty(q.numel() + 1, device="cuda", dtype=q.dtype)
    odd = storage[1:].view(q.shape)
    odd.copy_(q)
    torch.testing.assert_close(flashtile.flash_attn_func(odd, k, v, causal=True), expected, atol=0, rtol=0)
    # Autograd: the custom op records the call (the C++ path serves calls without gradients only).
    assert flashtile.flash_attn_func(q.clone().requires_grad_(), k, v, causal=True).grad_fn is not None
    # A changed Variant is another variant (its id changes): never the filed kernel of the old one.
    variant = flashtile.Variant("scaled_probe").param("gain", 1.0).score(lambda s, c, p: s * p["gain"])
    first = flashtile.attention(q, k, v, variant, params={"gain": 0.5})
    flashtile.attention(q, k, v, variant, params={"gain": 0.5})
    variant.score(lambda s, c, p: s * p["gain"] * 2.0)
    torch.testing.assert_close(flashtile.attention(q, k, v, variant, params={"gain": 0.25}), first)


def test_ctypes_path_when_the_extension_is_off():
    # The fallback: FLASHTILE_EXTENSION=off in a fresh process; the same results, and call_path() says why.
    import os
    import subprocess
    import sys

    script = (
        "import torch, flashtile\n"
        "torch.manual_seed(0)\n"
        "q, k, v = (torch.randn(2, 256, 4, 64, device='cuda', dtype=torch.bfloat16) for _ in range(3))\n"
        "outs = [flashtile.flash_attn_func(q, k, v, causal=True) for _ in range(3)]\n"
        "outs += [flashtile.attention(q, k, v, 'causal') for _ in range(3)]\n"
        "assert all(torch.equal(o, outs[0]) for o in outs)\n"
        "from flashtile import interface\n"
        "assert interface._fast is None\n"
        "print(flashtile.call_path())\n"
        "torch.save(outs[0].cpu(), __import__('sys').argv[1])\n")
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        saved = os.path.join(work, "out.pt")
        env = dict(os.environ, FLASHTILE_EXTENSION="off")
        child = subprocess.run([sys.executable, "-c", script, saved], env=env, capture_output=True, text=True,
                               timeout=300)
        assert child.returncode == 0, child.stdout + child.stderr
        assert "ctypes: FLASHTILE_EXTENSION=off" in child.stdout
        torch.random.manual_seed(0)
        q, k, v = (torch.randn(2, 256, 4, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        torch.testing.assert_close(torch.load(saved), flashtile.flash_attn_func(q, k, v, causal=True).cpu(), atol=0,
                                   rtol=0)

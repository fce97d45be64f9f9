"""FA4 as a peer of the benchmarks (bench/backward_bench.py, bench/bench_attention.py): flash-attn-4's CuTe kernels,
`flash_attn.cute.interface`, where bench/device/fa4-install.sh installed them on the GPU machine."""


def load_fa4():
    """flash_attn.cute.interface, or None (the column is then skipped, and a line says why)."""
    try:
        import importlib.metadata

        from flash_attn.cute import interface
        print(f"fa4: flash-attn-4 {importlib.metadata.version('flash-attn-4')}", flush=True)
        return interface
    except Exception as e:  # not installed here, or its CuTe DSL does not load
        print(f"fa4: column skipped, flash_attn.cute does not import ({type(e).__name__}: {str(e)[:160]})", flush=True)
        return None

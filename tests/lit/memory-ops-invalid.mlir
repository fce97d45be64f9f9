// RUN: flashtile-opt %s --split-input-file --verify-diagnostics
// The memory layer's verifiers (passes/IR/TileMemoryOps.cpp), one case each.

tile.func @tmem_cols attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{tensor memory columns must be a power of two in [32, 512] (tcgen05.alloc), got 384}}
  %t = tile.tmem : !tile.tmem<384>
}

// -----

tile.func @stats_tmem attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{row statistics live in registers or shared memory, not tensor memory}}
  %b = tile.smem_buffer "m" : !tile.mbuf<!tile.stats<128>, tensor>
}

// -----

tile.func @lanes attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{a tensor-memory tile has at most 128 rows (lanes), got 256}}
  %b = tile.smem_buffer "s" : !tile.mbuf<tensor<256x64xf32>, tensor>
}

// -----

tile.func @space attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{a buffer's memory space is registers, shared or tensor; got 'global'}}
  %b = tile.smem_buffer "a" : !tile.mbuf<tensor<128xf32>, global>
}

// -----

tile.func @columns attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %tmem = tile.tmem : !tile.tmem<128>
  // expected-error @+1 {{'tile.tmem_buffer' op takes columns [96, 160) of a tensor memory of 128 columns}}
  %o = tile.tmem_buffer %tmem {column = 96} : !tile.tmem<128> -> !tile.mbuf<tensor<128x64xf32>, tensor>
}

// -----

tile.func @smem_in_tmem attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.smem_buffer' op makes shared-memory or register buffers; tensor memory is cut by tile.tmem_buffer}}
  %b = tile.smem_buffer "s" : !tile.mbuf<tensor<128x64xf32>, tensor>
}

// -----

tile.func @alloc_outside attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %tmem = tile.tmem : !tile.tmem<512>
  // expected-error @+1 {{'tile.tmem_alloc' op runs inside a tile.role}}
  tile.tmem_alloc %tmem : !tile.tmem<512>
}

// -----

tile.func @channel attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.channel' op expects 1 to 1024 full arrivals per phase, got 0}}
  %f, %e = tile.channel "p_ready" {full_arrivals = 0, empty_arrivals = 1} : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
}

// -----

tile.func @channel_slots attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.channel' op is a one-slot channel: its barriers are !tile.barrier<slots = 1>}}
  %f, %e = tile.channel "p_ready" {full_arrivals = 1, empty_arrivals = 1} : !tile.barrier<slots = 2>, !tile.barrier<slots = 1>
}

// -----

tile.func @qk_rows attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %tmem = tile.tmem : !tile.tmem<512>
  %s = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xf32>, tensor>
  tile.role "mma" attributes {warps = 4, regs = 24} {
    %c0 = arith.constant 0 : i32
    %q = tile.load q : tensor<256x64xbf16>
    %k = tile.load k[%c0] : tensor<64x64xbf16>
    // expected-error @+1 {{'tile.mma_qk' op reads Q rows [256, 384): a whole 128-row tile of Q's 256}}
    tile.mma_qk %q, %k into %s {q_row_offset = 256} : tensor<256x64xbf16>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x64xf32>, tensor>
    tile.yield
  }
}

// -----

tile.func @qk_smem attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %s = tile.smem_buffer "s" : !tile.mbuf<tensor<128x64xf32>, shared>
  tile.role "mma" attributes {warps = 4, regs = 24} {
    %c0 = arith.constant 0 : i32
    %q = tile.load q : tensor<128x64xbf16>
    %k = tile.load k[%c0] : tensor<64x64xbf16>
    // expected-error @+1 {{'tile.mma_qk' op S must be a tensor-memory tile buffer, got '!tile.mbuf<tensor<128x64xf32>, shared>'}}
    tile.mma_qk %q, %k into %s : tensor<128x64xbf16>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x64xf32>, shared>
    tile.yield
  }
}

// -----

tile.func @pv_shape attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %tmem = tile.tmem : !tile.tmem<512>
  %p = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xbf16>, tensor>
  %o = tile.tmem_buffer %tmem {column = 128} : !tile.tmem<512> -> !tile.mbuf<tensor<128x128xf32>, tensor>
  tile.role "mma" attributes {warps = 4, regs = 24} {
    %c0 = arith.constant 0 : i32
    %v = tile.load v[%c0] : tensor<64x64xbf16>
    // expected-error @+1 {{'tile.mma_pv' op P 'tensor<128x64xbf16>' times V 'tensor<64x64xbf16>' does not fit O 'tensor<128x128xf32>'}}
    tile.mma_pv %p, %v into %o : !tile.mbuf<tensor<128x64xbf16>, tensor>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x128xf32>, tensor>
    tile.yield
  }
}

// -----

tile.func @load_type attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %tmem = tile.tmem : !tile.tmem<512>
  %p = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xbf16>, tensor>
  tile.role "softmax" attributes {warps = 4, regs = 24} {
    // expected-error @+1 {{'tile.mem_load' op reads '!tile.acc<128x64, tensor>' from a buffer of 'tensor<128x64xbf16>'}}
    %a = tile.mem_load %p : !tile.mbuf<tensor<128x64xbf16>, tensor> -> !tile.acc<128x64, tensor>
    tile.yield
  }
}

// -----

tile.func @store_outside attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %b = tile.smem_buffer "alpha" : !tile.mbuf<tensor<128xf32>, shared>
  %a = arith.constant dense<1.0> : tensor<128xf32>
  // expected-error @+1 {{'tile.mem_store' op runs inside a tile.role}}
  tile.mem_store %a into %b : tensor<128xf32>, !tile.mbuf<tensor<128xf32>, shared>
}

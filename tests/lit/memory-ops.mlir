// RUN: flashtile-opt %s | flashtile-opt | FileCheck %s
// The memory layer (passes/IR/TileMemoryOps.td): tensor memory declared, allocated and freed by a role, S, P over S
// and O as tensor-memory buffers, a rescale factor and row statistics as shared/register buffers, channels between
// roles, MMAs on buffers completed by a commit on a barrier, threads' loads and stores, init_stats apart from
// init_acc. Round trip (printed, parsed again, printed).

// CHECK-LABEL: tile.func @roles
// CHECK: %[[T:.*]] = tile.tmem : !tile.tmem<512>
// CHECK: %[[S:.*]] = tile.tmem_buffer %[[T]] {column = 0 : i64} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// CHECK: %[[P:.*]] = tile.tmem_buffer %[[T]] {column = 0 : i64} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xbf16>, tensor>
// CHECK: %[[O:.*]] = tile.tmem_buffer %[[T]] {column = 128 : i64} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// CHECK: %[[A:.*]] = tile.smem_buffer "alpha0" : !tile.mbuf<tensor<128xf32>, shared>
// CHECK: tile.smem_buffer "stats0" : !tile.mbuf<!tile.stats<128>, registers>
// CHECK: %[[SF:.*]], %[[SE:.*]] = tile.channel "s_ready0"(%[[S]] : !tile.mbuf<tensor<128x64xf32>, tensor>) {empty_arrivals = 1 : i64, full_arrivals = 1 : i64} : <slots = 1>, <slots = 1>
// CHECK: tile.channel "tmem_allocated" {empty_arrivals = 2 : i64, full_arrivals = 1 : i64} : <slots = 1>, <slots = 1>
// CHECK: tile.tmem_alloc %[[T]] : !tile.tmem<512>
// CHECK: tile.mma_qk %{{.*}}, %{{.*}} into %[[S]] {q_row_offset = 128 : i64} : tensor<256x64xbf16>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x64xf32>, tensor>
// CHECK: tile.mma_commit %[[SF]][%{{.*}}] : <slots = 1>
// CHECK: tile.mma_pv %[[P]], %{{.*}} into %[[O]] : !tile.mbuf<tensor<128x64xbf16>, tensor>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x64xf32>, tensor>
// CHECK: tile.tmem_free %[[T]] : !tile.tmem<512>
// CHECK: tile.init_stats : !tile.stats<128>
// CHECK: tile.mem_load %[[S]] : !tile.mbuf<tensor<128x64xf32>, tensor> -> tensor<128x64xf32>
// CHECK: tile.mem_store %{{.*}} into %[[A]] : tensor<128xf32>, !tile.mbuf<tensor<128xf32>, shared>
// CHECK: tile.init_acc : !tile.acc<128x64, tensor>
// CHECK: tile.mem_load %[[O]] : !tile.mbuf<tensor<128x64xf32>, tensor> -> !tile.acc<128x64, tensor>
tile.func @roles attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %tmem = tile.tmem : !tile.tmem<512>
  %s0 = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xf32>, tensor>
  %p0 = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xbf16>, tensor>
  %o0 = tile.tmem_buffer %tmem {column = 128} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xf32>, tensor>
  %alpha0 = tile.smem_buffer "alpha0" : !tile.mbuf<tensor<128xf32>, shared>
  %m0 = tile.smem_buffer "stats0" : !tile.mbuf<!tile.stats<128>, registers>
  %sFull, %sEmpty = tile.channel "s_ready0" (%s0 : !tile.mbuf<tensor<128x64xf32>, tensor>) {full_arrivals = 1, empty_arrivals = 1} : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  %aFull, %aEmpty = tile.channel "tmem_allocated" {full_arrivals = 1, empty_arrivals = 2} : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
  tile.role "mma" attributes {warps = 4, regs = 24} {
    %c0 = arith.constant 0 : i32
    tile.tmem_alloc %tmem : !tile.tmem<512>
    %q = tile.load q : tensor<256x64xbf16>
    %k = tile.load k[%c0] : tensor<64x64xbf16>
    %v = tile.load v[%c0] : tensor<64x64xbf16>
    tile.mma_qk %q, %k into %s0 {q_row_offset = 128} : tensor<256x64xbf16>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x64xf32>, tensor>
    tile.mma_commit %sFull[%c0] : !tile.barrier<slots = 1>
    tile.mma_pv %p0, %v into %o0 : !tile.mbuf<tensor<128x64xbf16>, tensor>, tensor<64x64xbf16>, !tile.mbuf<tensor<128x64xf32>, tensor>
    tile.tmem_free %tmem : !tile.tmem<512>
    tile.yield
  }
  tile.role "softmax" attributes {warps = 4, regs = 240} {
    %c0 = arith.constant 0 : i32
    %st = tile.init_stats : !tile.stats<128>
    tile.barrier_wait %sFull[%c0] : !tile.barrier<slots = 1>
    %s = tile.mem_load %s0 : !tile.mbuf<tensor<128x64xf32>, tensor> -> tensor<128x64xf32>
    %p, %alpha, %st1 = tile.softmax_update %s, %st : tensor<128x64xf32>, !tile.stats<128> -> tensor<128x64xbf16>, tensor<128xf32>
    tile.mem_store %alpha into %alpha0 : tensor<128xf32>, !tile.mbuf<tensor<128xf32>, shared>
    tile.mem_store %p into %p0 : tensor<128x64xbf16>, !tile.mbuf<tensor<128x64xbf16>, tensor>
    tile.mem_store %st1 into %m0 : !tile.stats<128>, !tile.mbuf<!tile.stats<128>, registers>
    tile.yield
  }
  tile.role "correction" attributes {warps = 4, regs = 240} {
    %z = tile.init_acc : !tile.acc<128x64, tensor>
    tile.mem_store %z into %o0 : !tile.acc<128x64, tensor>, !tile.mbuf<tensor<128x64xf32>, tensor>
    %o = tile.mem_load %o0 : !tile.mbuf<tensor<128x64xf32>, tensor> -> !tile.acc<128x64, tensor>
    tile.yield
  }
}

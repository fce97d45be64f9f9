// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa4 options=softmax-warpgroups=1" --tile-split-boundary --tile-fa4-roles | FileCheck %s
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa4" --tile-split-boundary --tile-fa4-roles | FileCheck %s --check-prefix=TWO
// RUN: not flashtile-opt %inputs/causal.mlir --tile-fa4-roles 2>&1 | FileCheck %s --check-prefix=UNSCHEDULED
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=fa4" --tile-fa4-roles 2>&1 | FileCheck %s --check-prefix=UNSPLIT

// FA4's own roles on the memory layer (schedules/fa4/Fa4RolesPass.cpp), one Q tile: S at column 0, P over it, O
// after it; the channels between the roles; a load warp, the MMA warp (it allocates and frees tensor memory and
// issues every MMA, committed to channels and to the K/V ring's empty barriers), a softmax warpgroup and a correction
// warpgroup that also stores O / l and the LSE (FA4's correction epilogue).
// CHECK: %[[T:.*]] = tile.tmem : !tile.tmem<128>
// CHECK: %[[TF:.*]], %[[TE:.*]] = tile.channel "tmem" {empty_arrivals = 2 : i64, full_arrivals = 1 : i64}
// CHECK: %[[S:.*]] = tile.tmem_buffer %[[T]] {column = 0 : i64} : !tile.tmem<128> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// CHECK: %[[P:.*]] = tile.tmem_buffer %[[T]] {column = 0 : i64} : !tile.tmem<128> -> !tile.mbuf<tensor<128x64xbf16>, tensor>
// CHECK: %[[O:.*]] = tile.tmem_buffer %[[T]] {column = 64 : i64} : !tile.tmem<128> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// CHECK: %[[A:.*]] = tile.smem_buffer "alpha0" : !tile.mbuf<tensor<128xf32>, shared>
// CHECK: %[[M:.*]] = tile.smem_buffer "stats0" : !tile.mbuf<!tile.stats<128>, registers>
// CHECK: %[[F:.*]] = tile.smem_buffer "final0" : !tile.mbuf<!tile.stats<128>, shared>
// CHECK: %[[SF:.*]], %[[SE:.*]] = tile.channel "s0"(%[[S]], %[[P]] :
// CHECK: %[[OF:.*]], %[[OE:.*]] = tile.channel "o0"(%[[O]] :
// CHECK: %[[AF:.*]], %[[AE:.*]] = tile.channel "alpha0"(%[[A]] :
// CHECK: %[[FF:.*]], %{{.*}} = tile.channel "final0"(%[[F]], %[[O]] : {{.*}} {empty_arrivals = 1 : i64, full_arrivals = 3 : i64}

// CHECK: tile.role "load" attributes {regs = 48 : i64, warps = 1 : i64}
// CHECK: tile.copy_async k
// CHECK: tile.role "mma" attributes {regs = 48 : i64, warps = 1 : i64}
// CHECK: tile.tmem_alloc %[[T]]
// CHECK-NEXT: tile.barrier_arrive %[[TF]]
// CHECK: tile.kv_walk
// CHECK: tile.barrier_wait %[[OF]][%[[PREV:.*]]] : <slots = 1>
// CHECK-NEXT: tile.mma_qk %{{.*}}, %{{.*}} into %[[S]]
// CHECK-NEXT: tile.mma_commit %[[SF]]
// CHECK-NEXT: tile.mma_commit %{{.*}} : <slots = 2>
// CHECK: tile.barrier_wait %[[SE]][%[[NEXT:.*]]] : <slots = 1>
// CHECK-NEXT: tile.barrier_wait %[[OE]][%[[NEXT]]] : <slots = 1>
// CHECK-NEXT: tile.mma_pv %[[P]], %{{.*}} into %[[O]]
// CHECK-NEXT: tile.mma_commit %[[OF]]
// CHECK-NEXT: tile.mma_commit %{{.*}} : <slots = 2>
// CHECK: tile.mma_commit %[[FF]]
// CHECK-NEXT: tile.barrier_wait %[[TE]]
// CHECK-NEXT: tile.tmem_free %[[T]]

// The softmax warpgroup: S from tensor memory, the variant's mask on the boundary segment only, m and l in registers.
// CHECK: tile.role "softmax0" attributes {regs = 192 : i64, warps = 4 : i64}
// CHECK: tile.init_stats : !tile.stats<128>
// CHECK: tile.kv_walk
// CHECK: tile.barrier_wait %[[SF]]
// CHECK-NEXT: tile.mem_load %[[S]] : !tile.mbuf<tensor<128x64xf32>, tensor> -> tensor<128x64xf32>
// CHECK-NEXT: tile.mem_load %[[M]]
// CHECK-NEXT: tile.scale
// CHECK-NEXT: tile.mask
// CHECK: tile.softmax_update
// CHECK-NEXT: tile.mem_store %{{.*}} into %[[M]]
// CHECK-NEXT: tile.barrier_wait %[[AE]]
// CHECK-NEXT: tile.mem_store %{{.*}} into %[[A]]
// CHECK-NEXT: tile.barrier_arrive %[[AF]]
// CHECK-NEXT: tile.mem_store %{{.*}} into %[[P]]
// CHECK-NEXT: tile.barrier_arrive %[[SE]]
// CHECK: tile.kv_walk
// CHECK-NOT: tile.mask
// CHECK: tile.softmax_update
// CHECK: tile.mem_store %{{.*}} into %[[F]]
// CHECK-NEXT: tile.barrier_arrive %[[FF]]

// The correction warpgroup: O zeroed, then rescaled in tensor memory by every tile's alpha.
// CHECK: tile.role "correction" attributes {regs = 80 : i64, warps = 4 : i64}
// CHECK: tile.init_acc : !tile.acc<128x64, tensor>
// CHECK-NEXT: tile.mem_store %{{.*}} into %[[O]]
// CHECK: tile.barrier_wait %[[AF]]
// CHECK-NEXT: tile.mem_load %[[A]]
// CHECK-NEXT: tile.barrier_arrive %[[AE]]
// CHECK-NEXT: tile.barrier_wait %[[OF]]
// CHECK-NEXT: tile.mem_load %[[O]] : !tile.mbuf<tensor<128x64xf32>, tensor> -> !tile.acc<128x64, tensor>
// CHECK-NEXT: tile.rescale
// CHECK-NEXT: tile.mem_store %{{.*}} into %[[O]]
// CHECK-NEXT: tile.barrier_arrive %[[OE]]

// The correction's epilogue: once final is full, O / l and the LSE of the tile's rows.
// CHECK: tile.barrier_arrive %[[FF]]
// CHECK-NEXT: tile.barrier_wait %[[FF]]
// CHECK-NEXT: tile.mem_load %[[F]]
// CHECK-NEXT: tile.mem_load %[[O]]
// CHECK-NEXT: tile.finalize
// CHECK-NEXT: tile.store o {{.*}} {tile.q_rows = array<i64: 0, 128>}
// CHECK-NEXT: tile.store lse {{.*}} {tile.q_rows = array<i64: 0, 128>}
// CHECK-NEXT: tile.barrier_arrive %[[TE]]

// Two Q tiles: O_0 at 128 after S_0 and S_1 (64), O_1 at 192; the second Q·Kᵀ reads Q's rows from 128 on.
// TWO: tile.tmem : !tile.tmem<256>
// TWO: tile.tmem_buffer %{{.*}} {column = 128 : i64} : !tile.tmem<256> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// TWO: tile.tmem_buffer %{{.*}} {column = 64 : i64} : !tile.tmem<256> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// TWO: tile.tmem_buffer %{{.*}} {column = 192 : i64} : !tile.tmem<256> -> !tile.mbuf<tensor<128x64xf32>, tensor>
// TWO: tile.mma_qk {{.*}} {q_row_offset = 128 : i64} : tensor<256x64xbf16>
// TWO: tile.role "softmax1"
// TWO: tile.role "correction"
// TWO: tile.store o {{.*}} {tile.q_rows = array<i64: 0, 128>}
// TWO: tile.store o {{.*}} {tile.q_rows = array<i64: 128, 128>}

// UNSCHEDULED: 'tile.func' op must be scheduled before tile-fa4-roles (run tile-apply-schedule)
// UNSPLIT: 'tile.kv_loop' op must be a bounded, descending segment carrying only the state (run tile-split-boundary first)

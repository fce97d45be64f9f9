// RUN: flashtile-opt %s --tile-verify-program | FileCheck %s
// RUN: flashtile-opt %s --tile-verify-program --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// A program declares its kind (passes/IR/ProgramKinds.h); forward is the default, so an explicit
// kind = "forward" verifies as the forward program and prints as the default (elided).
// CHECK-LABEL: tile.func @attention attributes
// CHECK-NOT: kind
// CHECK: tile.store lse
// GENERIC: kind = "forward"
tile.func @attention attributes {kind = "forward", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<?x64xbf16>
  %init_m, %init_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %m, %acc = tile.kv_loop iter_args(%init_m, %init_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %st_m: !tile.stats<?>, %st_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
    %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %s : tensor<?x?xf32>
    %p, %alpha, %st1_m = tile.softmax_update %s1, %st_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %st2_acc = tile.rescale %st_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %st3_acc = tile.pv %p, %v, %st2_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %st1_m, %st3_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %m, %acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// RUN: flashtile-opt %s --tile-apply-schedule="schedule=fa9" --verify-diagnostics
// expected-error @+1 {{'tile.func' op unknown schedule 'fa9' (did you mean 'fa1'?); available: decode, fa1, fa2}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<?x64xbf16>
  %st0 = tile.init_state : !tile.state<?x64>
  %st = tile.kv_loop iter_args(%st0) : !tile.state<?x64> -> !tile.state<?x64> {
  ^bb0(%j: i32, %s: !tile.state<?x64>):
    tile.yield %s : !tile.state<?x64>
  }
  %o, %lse = tile.finalize %st : !tile.state<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

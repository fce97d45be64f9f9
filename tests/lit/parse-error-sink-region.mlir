// A name used before its definition outside tile.finalize, then defined inside its sink region, which parses; the op's
// own syntax then fails after the region (found by fuzz-ir). The region's values must not stay in use outside it when
// the failed op frees the region (it was a use-after-free in flashtile-opt, a heap-corruption abort): the use is an
// error of its own. Under valgrind (exit 99 on a memory error), flashtile-opt must exit 1, the parse error's status.
// RUN: not flashtile-opt %s 2>&1 | FileCheck %s
// RUN: bash -c 'command -v valgrind >/dev/null || exit 0; valgrind -q --error-exitcode=99 flashtile-opt %s >/dev/null 2>&1; test $? -eq 1'
// CHECK: error: custom op 'tile.finalize' a value defined in this region is used outside it
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "sinks", params = [],
                         inputs = [#tile.input<"sinks" : f32>]} {
  %st_m, %st_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %twice = arith.addf %s, %s : f32
  %o, %lse = tile.finalize %st_m, %st_acc sink {
  ^bb0(%b: i32, %h: i32):
    %s = tile.input "sinks"[%h] : f32
    tile.yield %s : f32
  } : !tile.stats<?>, !tile.acc<?x64>
}

// A name used before its definition outside a region op, then defined inside the op's region, whose parse then fails
// (found by fuzz-ir): the parse error is reported and nothing is left pointing at the freed region (it was a
// use-after-free in flashtile-opt, a heap-corruption abort on some runs). Under valgrind (exit 99 on a memory error),
// flashtile-opt must exit 1, the parse error's status.
// RUN: not flashtile-opt %s 2>&1 | FileCheck %s
// RUN: bash -c 'command -v valgrind >/dev/null || exit 0; valgrind -q --error-exitcode=99 flashtile-opt %s >/dev/null 2>&1; test $? -eq 1'
// CHECK: error: expected operation name in quotes
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %s1 = tile.load q : tensor<?x64xbf16>
  %t = arith.mulf %sq, %sq : f32
  %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    %sq = arith.mulf %score, %score : f32
  ^bb0(%j: i32):

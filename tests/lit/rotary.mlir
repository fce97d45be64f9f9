// RUN: flashtile-opt %s --split-input-file --verify-diagnostics | FileCheck %s
// tile.rotary (passes/IR/TileRotary.h): rotary embedding of the Q tile, an attribute of the program's Q load.

// CHECK-LABEL: tile.func @rows
// CHECK: tile.load q {tile.rotary = {interleaved = false, positions = "rows"}} : tensor<?x64xbf16>
tile.func @rows attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "causal", params = []} {
  %q = tile.load q {tile.rotary = {interleaved = false, positions = "rows"}} : tensor<?x64xbf16>
}

// -----

// CHECK-LABEL: tile.func @first
// CHECK: tile.load q {tile.rotary = {interleaved = true, positions = "first"}} : tensor<?x64xbf16>
tile.func @first attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q {tile.rotary = {interleaved = true, positions = "first"}} : tensor<?x64xbf16>
}

// -----

tile.func @k attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.load' op tile.rotary rotates the Q tile only (the appended keys follow Q's attribute)}}
  %k = tile.load k[%c0] {tile.rotary = {interleaved = true, positions = "first"}} : tensor<?x64xbf16>
}

// -----

tile.func @positions attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op tile.rotary must be {interleaved = true|false, positions = "rows"|"first"}, got {interleaved = true, positions = "all"}}}
  %q = tile.load q {tile.rotary = {interleaved = true, positions = "all"}} : tensor<?x64xbf16>
}

// -----

tile.func @string attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op tile.rotary must be {interleaved = true|false, positions = "rows"|"first"}, got "interleaved"}}
  %q = tile.load q {tile.rotary = "interleaved"} : tensor<?x64xbf16>
}

// -----

tile.func @extra attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @+1 {{'tile.load' op tile.rotary must be {interleaved = true|false, positions = "rows"|"first"}}}
  %q = tile.load q {tile.rotary = {interleaved = 1 : i32, positions = "rows"}} : tensor<?x64xbf16>
}

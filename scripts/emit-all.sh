#!/usr/bin/env bash
# Prints the CUDA of every built-in variant x head dim x dtype x arch x shape class x stages into DIR (one .cu file
# each), with the given flashtile binary. Two runs compared with `diff -r` show what a compiler change does to the
# emitted kernels; --strip-comments drops // comments and blank lines first, so only code differences remain.
#   scripts/emit-all.sh FLASHTILE_BINARY DIR [--strip-comments]
set -euo pipefail
bin="$1" dir="$2" strip="${3:-}"
mkdir -p "$dir"
variants="none causal causal_top_left sliding_window sliding_window_causal softcap softcap_causal alibi alibi_per_batch alibi_causal sinks sinks_causal document_mask"
for v in $variants; do
  for d in 64 96 128 192 256 192:128; do
    hd="${d%%:*}"; hdv="${d##*:}"
    for dt in bf16 f16; do
      for arch in sm_80 sm_90a; do
        for sc in default short; do
          for st in default 1 2; do
            out="$dir/${v}_${dt}_d${hd}_dv${hdv}_${arch}_${sc}_s${st}.cu"
            extra=()
            [ "$st" != default ] && extra=(--stages "$st")
            if ! "$bin" emit --variant "$v" --dtype "$dt" --head-dim "$hd" --head-dim-v "$hdv" --arch "$arch" \
                 --shape-class "$sc" "${extra[@]}" -o "$out" 2>"$out.err"; then
              mv "$out.err" "$out.failed"; rm -f "$out"
              continue
            fi
            rm -f "$out.err"
            if [ "$strip" = --strip-comments ]; then
              sed -e 's#[[:space:]]*//.*$##' -e '/^[[:space:]]*$/d' "$out" > "$out.tmp" && mv "$out.tmp" "$out"
            fi
          done
        done
      done
    done
  done
done
ls "$dir" | wc -l

//===- Main.cpp - the flashtile command-line tool -------------------------===//
#include "Commands.h"

#include <cstdio>
#include <string>
#include <vector>

namespace {
constexpr const char *kUsage = R"(usage: flashtile <command> [flags]

commands (no GPU needed):
  compile   --variant NAME --schedule fa2 --arch sm_80|sm_90a|sm_100a --head-dim 32|64|96|128|192|256
            --dtype bf16|f16 --emit tile|scheduled|cuda|ptx|cubin [-o FILE] [--print-ir-after-all]
            [--head-dim-v N (e.g. 128 with --head-dim 192) --block-m N --block-n N --warps N --stages N
             --rescale-threshold N (0: rescale every tile; 1-15: only when a row max grows by more than N, log2)
             --min-blocks-per-sm N (registers capped so N blocks fit an SM; 0: no cap)
             --lpt-group-blocks N (0: heaviest Q tile first per batch entry and head; N: across >= N-block groups)
             --shape-class default|short (short: for sequences of <= 1024 query and key rows on average)]
            NAME: none, causal, causal_top_left, sliding_window, sliding_window_causal, softcap, softcap_causal,
            alibi, alibi_per_batch, alibi_causal, sinks, sinks_causal, document_mask (examples/variants/)
  emit      like compile, --emit defaults to cuda
  aot       --out DIR [--variants none,causal --dtypes bf16,f16 --head-dims 64,128 --arch sm_90a
             --shape-classes default,short]
            writes <kernel>.cubin + <kernel>.manifest for Runtime::loadAotDirectory; --head-dims items are D
            (head_dim = head_dim_v = D) or D:DV (head_dim D, head_dim_v DV): all the runtime supports is
            --head-dims 32,64,96,128,192,256,192:128
  summary   [--arch sm_80,sm_90a,sm_100a] compiles a representative set of kernels (every variant, head dim,
            dtype, arch) and prints a table
  info      versions of flashtile, NVRTC and the GPU driver
  nvrtc     FILE.cu... [--arch sm_90a] NVRTC-compiles generated CUDA (e.g. the .cu files aot writes) and times it

commands (GPU):
  run       --variant causal --dtype bf16 --head-dim 128 [--head-dim-v N] --batch 2 --heads 16 [--heads-kv N]
            --seqlen-q 4096 --seqlen-k 4096 [--aot-dir DIR] [--iters 20 --warmup 5 --scale S --seed N]
            runs the kernel on random inputs, checks it against an fp32 reference, prints error and TFLOP/s;
            exit code 0 when the check passes
)";
} // namespace

int main(int argc, char **argv) {
  using namespace flashtile::cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "compile")
    return compileCommand(args, /*emitDefaultsToCuda=*/false);
  if (command == "emit")
    return compileCommand(args, /*emitDefaultsToCuda=*/true);
  if (command == "aot")
    return aotCommand(args);
  if (command == "summary")
    return summaryCommand(args);
  if (command == "run")
    return runCommand(args);
  if (command == "nvrtc")
    return nvrtcCommand(args);
  if (command == "info")
    return infoCommand();
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "flashtile: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}

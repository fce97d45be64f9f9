// Compiles the causal variant to CUDA through the installed library (needs no GPU) and prints its id.
#include <flashtile/runtime/CApiJit.h>

#include <cstdio>
#include <cstring>

int main() {
  char *id = flashtile_variant_id("causal");
  char *cuda = flashtile_compile_variant("causal", "cuda", FLASHTILE_BF16, 128, 0, "sm_90a");
  if (!id || !cuda) {
    std::fprintf(stderr, "flashtile: %s\n", flashtile_last_error());
    return 1;
  }
  std::printf("%s: %zu bytes of CUDA\n", id, std::strlen(cuda));
  flashtile_string_free(id);
  flashtile_string_free(cuda);
  return 0;
}

/* VariantFuzzWorker.c — hands variant descriptions to the C ABI's JIT entry points, for fuzz_variant.py.
 *
 * Reads frames from standard input until its end: one byte naming the entry point, a 4-byte little-endian length,
 * then that many bytes of description (a NUL inside it ends the C string early, as it would for any caller):
 *   'i' flashtile_variant_id   'r' flashtile_register_variant
 *   't' flashtile_compile_variant up to the tile IR   'c' ... up to CUDA (sm_80, head dim 64; no NVRTC)
 * An error is the expected answer to a bad description; a crash or a hang is a bug the driver reports. Prints one
 * line per frame ("<index> ok" or "<index> error: <first 120 bytes>") so that the driver can tell how far it got. */
#include "flashtile/runtime/CApiJit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int readAll(void *buffer, size_t size) { return fread(buffer, 1, size, stdin) == size; }

int main(void) {
  for (unsigned long index = 0;; ++index) {
    unsigned char header[5];
    if (!readAll(header, sizeof header))
      return 0;
    uint32_t length =
        (uint32_t)header[1] | (uint32_t)header[2] << 8 | (uint32_t)header[3] << 16 | (uint32_t)header[4] << 24;
    char *text = malloc((size_t)length + 1);
    if (!text || !readAll(text, length)) {
      fprintf(stderr, "frame %lu: cannot read %u bytes\n", index, length);
      return 2;
    }
    text[length] = '\0';
    char *result = NULL;
    switch (header[0]) {
    case 'i':
      result = flashtile_variant_id(text);
      break;
    case 'r':
      result = flashtile_register_variant(text);
      break;
    case 't':
      result = flashtile_compile_variant(text, "tile", FLASHTILE_BF16, 64, 0, "sm_80");
      break;
    case 'c':
      result = flashtile_compile_variant(text, "cuda", FLASHTILE_BF16, 64, 0, "sm_80");
      break;
    default:
      fprintf(stderr, "frame %lu: unknown entry point '%c'\n", index, header[0]);
      return 2;
    }
    if (result)
      printf("%lu ok\n", index);
    else
      printf("%lu error: %.120s\n", index, flashtile_last_error());
    fflush(stdout);
    flashtile_string_free(result);
    free(text);
  }
}

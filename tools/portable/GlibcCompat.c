/* GlibcCompat.c — lets binaries built here start on machines whose glibc is older than this build machine's.
 *
 * flashtile_gpu_tests and the runtime-only `flashtile` link libstdc++ statically (the GPU machine may lack a
 * recent one). GCC 12's static libstdc++ implements std::random_device with arc4random, which glibc added in 2.36
 * (Debian 12 has it; Ubuntu 22.04's 2.35 does not), so such a binary would refuse to start there. This definition
 * satisfies that reference at link time, keeping the binary at GLIBC_2.34. It is only used by code linked into the
 * binary (glibc's own callers keep glibc's version). Linked as an object library (flashtile_portable), not from an
 * archive, so that the definition is present before the static libstdc++ asks for it.
 */
#include <fcntl.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

uint32_t arc4random(void) {
  uint32_t value = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = read(fd, &value, sizeof value);
    close(fd);
    if (got == (ssize_t)sizeof value)
      return value;
  }
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint32_t)now.tv_nsec ^ (uint32_t)now.tv_sec ^ ((uint32_t)getpid() << 16);
}

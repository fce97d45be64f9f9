/* StandInDevice.h — the GPU that both stand-in CUDA drivers describe unless a test says otherwise: the GPU machine's
 * H100/H200 (compute capability 9.0, 132 SMs, 227 KiB of shared memory a block may opt into).
 *
 * The two drivers: tests/unit/runtime/StandInDriver.h fills the runtime's CudaDriver table in the test's own process
 * (C++, state each test resets); tests/python/FakeCuda.c is a libcuda.so.1 of its own, built by the Python tests with
 * the system's C compiler and loaded by a child process in place of the driver (C, no C++ runtime, state read back
 * through its exported functions). What they can share is the device they describe: these numbers, in C for both. */
#ifndef FLASHTILE_TESTS_COMMON_STANDINDEVICE_H
#define FLASHTILE_TESTS_COMMON_STANDINDEVICE_H

enum {
  kStandInComputeMajor = 9,
  kStandInComputeMinor = 0,
  kStandInMultiprocessors = 132,
  kStandInSharedMemoryPerBlock = 227 * 1024,
  /* cuOccupancyMaxActiveBlocksPerMultiprocessor's answer for every kernel */
  kStandInBlocksPerMultiprocessor = 2
};

#endif /* FLASHTILE_TESTS_COMMON_STANDINDEVICE_H */

//===- CacheCommand.cpp - `flashtile cache list|clear|stats` --------------===//
//
// The JIT's disk cache (FLASHTILE_CACHE_DIR, default ~/.cache/flashtile), seen and emptied from the shell. The
// runtime does the work (KernelCache); this prints it.
//===----------------------------------------------------------------------===//
#include "Commands.h"

#include "flashtile/runtime/KernelCache.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cstdio>
#include <ctime>
#include <filesystem>

namespace flashtile::cli {

namespace {

std::string mebibytes(uint64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

/// The cache the runtime would use here, or why there is no disk cache to manage.
StatusOr<KernelCache::Options> diskCacheOptions() {
  KernelCache::Options options = KernelCache::optionsFromEnvironment();
  if (!options.diskEnabled || options.dir.empty())
    return Status::error("the disk cache is off here (FLASHTILE_DISABLE_CACHE is set, or neither "
                         "FLASHTILE_CACHE_DIR nor HOME is): there is nothing on disk to manage");
  return options;
}

int runList() {
  StatusOr<KernelCache::Options> options = diskCacheOptions();
  if (!options.ok())
    return fail(options.status());
  KernelCache cache(*options);
  StatusOr<std::vector<KernelCache::DiskEntry>> entries = cache.listDiskEntries();
  if (!entries.ok())
    return fail(entries.status());
  fmt::print("{:<19} {:>10}  {:<22} {}\n", "last used", "bytes", "file", "key");
  for (const KernelCache::DiskEntry &entry : *entries)
    fmt::print("{:%Y-%m-%d %H:%M:%S} {:>10}  {:<22} {}\n", fmt::localtime(entry.lastUsed), entry.bytes,
               std::filesystem::path(entry.path).filename().string(),
               entry.key.empty() ? "(not a readable entry: rebuilt on next use)" : entry.key);
  uint64_t total = 0;
  for (const KernelCache::DiskEntry &entry : *entries)
    total += entry.bytes;
  fmt::print("{} entries, {} in {} (least recently used first)\n", entries->size(), mebibytes(total), options->dir);
  return 0;
}

int runStats() {
  StatusOr<KernelCache::Options> options = diskCacheOptions();
  if (!options.ok())
    return fail(options.status());
  KernelCache cache(*options);
  StatusOr<KernelCache::DiskUsage> usage = cache.diskUsage();
  if (!usage.ok())
    return fail(usage.status());
  fmt::print("directory   {}\n", options->dir);
  fmt::print("entries     {}\n", usage->entries);
  fmt::print("size        {}\n", mebibytes(usage->bytes));
  fmt::print("size cap    {}\n", options->maxBytes ? mebibytes(options->maxBytes) + " (FLASHTILE_CACHE_MAX_MB)"
                                                   : "none (set FLASHTILE_CACHE_MAX_MB)");
  fmt::print("temp files  {}\n", usage->tempFiles);
  if (!options->warning.empty())
    fmt::print("warning     {}\n", options->warning);
  return 0;
}

int runClear() {
  StatusOr<KernelCache::Options> options = diskCacheOptions();
  if (!options.ok())
    return fail(options.status());
  KernelCache cache(*options);
  StatusOr<uint64_t> removed = cache.clearDisk();
  if (!removed.ok())
    return fail(removed.status());
  fmt::print("removed {} files from {}\n", *removed, options->dir);
  return 0;
}

} // namespace

void registerCacheCommand(CLI::App &app, Registry &registry) {
  CLI::App *cache = addCommand(app, "cache",
                               "The JIT's kernel cache on disk (FLASHTILE_CACHE_DIR, default ~/.cache/flashtile; "
                               "FLASHTILE_CACHE_MAX_MB caps its size, least recently used out)");
  cache->require_subcommand(0, 1);
  registry.add(addCommand(*cache, "list", "List the entries, least recently used first"), runList);
  registry.add(addCommand(*cache, "stats", "Entries, size, size cap and temporary files"), runStats);
  registry.add(addCommand(*cache, "clear", "Remove every entry (and leftover temporary files)"), runClear);
}

} // namespace flashtile::cli

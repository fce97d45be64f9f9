// Log.cpp — one process-wide warning handler; stderr by default.
#include "flashtile/runtime/Log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

using namespace flashtile;

namespace {
std::mutex handlerMutex;
LogHandler &installedHandler() {
  static LogHandler handler;
  return handler;
}

bool stderrEnabled() {
  const char *setting = std::getenv("FLASHTILE_LOG");
  if (!setting)
    return true;
  std::string_view value(setting);
  return value != "off" && value != "0";
}
} // namespace

LogHandler flashtile::setLogHandler(LogHandler handler) {
  std::lock_guard<std::mutex> lock(handlerMutex);
  LogHandler previous = std::move(installedHandler());
  installedHandler() = std::move(handler);
  return previous;
}

void flashtile::logWarning(std::string_view message) {
  LogHandler handler;
  {
    std::lock_guard<std::mutex> lock(handlerMutex);
    handler = installedHandler();
  }
  if (handler) {
    // A handler that throws must not take the runtime call that warned down with it.
    try {
      handler(message);
    } catch (...) {
    }
    return;
  }
  if (stderrEnabled())
    std::fprintf(stderr, "flashtile: warning: %.*s\n", static_cast<int>(message.size()), message.data());
}

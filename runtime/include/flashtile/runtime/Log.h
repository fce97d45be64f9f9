// Log.h — the runtime's warnings: problems that do not fail a call but that a user should hear about once (a
// kernel cache that cannot be written, a cache entry that is not a regular file).
//
// By default a warning goes to stderr as "flashtile: warning: ...". FLASHTILE_LOG=off (or 0) silences them;
// a program that has its own logging installs a handler instead.
#ifndef FLASHTILE_RUNTIME_LOG_H
#define FLASHTILE_RUNTIME_LOG_H

#include <functional>
#include <string_view>

namespace flashtile {

/// Receives each warning's text (one line, no trailing newline). Called from whichever thread met the problem;
/// it must not call back into the runtime.
using LogHandler = std::function<void(std::string_view message)>;

/// Installs `handler` for the whole process (an empty one restores the default) and returns the previous one.
LogHandler setLogHandler(LogHandler handler);

/// Sends `message` to the installed handler, or to stderr unless FLASHTILE_LOG is "off" or "0".
void logWarning(std::string_view message);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_LOG_H

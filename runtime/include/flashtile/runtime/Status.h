// Status.h — the runtime's error values. Nothing in the public API throws or aborts on bad input; every call
// that can fail returns a Status (or a StatusOr<T> carrying the result) whose message names the offending
// argument and what would have been accepted.
#ifndef FLASHTILE_RUNTIME_STATUS_H
#define FLASHTILE_RUNTIME_STATUS_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace flashtile {

class [[nodiscard]] Status {
public:
  /// The success value.
  Status() = default;

  static Status error(std::string message) {
    Status status;
    status.failed = true;
    status.text = message.empty() ? "unknown error" : std::move(message);
    return status;
  }

  bool ok() const { return !failed; }
  /// Empty for a success.
  const std::string &message() const { return text; }

  /// Prefixes context to an error ("loading kernels.manifest: ..."); a success stays a success.
  Status withContext(const std::string &context) const { return ok() ? *this : error(context + ": " + text); }

private:
  bool failed = false;
  std::string text;
};

/// Either a value or a failed Status.
template <class T> class [[nodiscard]] StatusOr {
public:
  StatusOr(T value) : result(std::move(value)) {}
  /// `status` must be an error: an ok Status carries no value to return.
  StatusOr(Status status) : failure(std::move(status)) {
    assert(!failure.ok() && "StatusOr built from an ok Status");
    if (failure.ok())
      failure = Status::error("internal error: StatusOr built from an ok Status");
  }

  bool ok() const { return result.has_value(); }
  /// The error, or an ok Status when a value is held.
  const Status &status() const { return failure; }

  T &operator*() & {
    assert(ok());
    return *result;
  }
  const T &operator*() const & {
    assert(ok());
    return *result;
  }
  T &&operator*() && {
    assert(ok());
    return std::move(*result);
  }
  T *operator->() {
    assert(ok());
    return &*result;
  }
  const T *operator->() const {
    assert(ok());
    return &*result;
  }

private:
  std::optional<T> result;
  Status failure;
};

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_STATUS_H

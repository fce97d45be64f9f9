//===- Concat.h - strings and integers joined, for the targets' printers --===//
#ifndef FLASHTILE_CODEGEN_COMMON_CONCAT_H
#define FLASHTILE_CODEGEN_COMMON_CONCAT_H

#include <cstdint>
#include <string>

namespace flashtile::codegen {

namespace detail {
inline void append(std::string &s, const char *part) { s.append(part); }
inline void append(std::string &s, const std::string &part) { s.append(part); }
inline void append(std::string &s, int64_t value) { s.append(std::to_string(value)); }
inline void append(std::string &s, int value) { s.append(std::to_string(value)); }
} // namespace detail

/// Concatenates strings and integers.
template <typename... Parts> std::string cat(const Parts &...parts) {
  std::string s;
  (detail::append(s, parts), ...);
  return s;
}

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_CONCAT_H

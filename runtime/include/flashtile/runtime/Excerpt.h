// Excerpt.h — an input echoed in an error message, cut to a readable length.
#ifndef FLASHTILE_RUNTIME_EXCERPT_H
#define FLASHTILE_RUNTIME_EXCERPT_H

#include <cstddef>
#include <string>
#include <string_view>

namespace flashtile {

/// Longest input an error message repeats whole.
inline constexpr size_t kMaxEchoedBytes = 200;

/// `text` for an error message: whole when it is at most `maxBytes` long, else its first `maxBytes` bytes (cut
/// before a UTF-8 continuation byte) and how long it was, so that a megabyte of input never comes back whole.
inline std::string excerpt(std::string_view text, size_t maxBytes = kMaxEchoedBytes) {
  if (text.size() <= maxBytes)
    return std::string(text);
  size_t cut = maxBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_EXCERPT_H

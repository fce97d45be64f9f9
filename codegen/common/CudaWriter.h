//===- CudaWriter.h - indented CUDA C++ text ------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_CUDAWRITER_H
#define FLASHTILE_CODEGEN_COMMON_CUDAWRITER_H

#include <string>
#include <string_view>

namespace flashtile::codegen {

/// Accumulates CUDA source line by line; `open` and `close` print braces and keep the indentation.
class CudaWriter {
public:
  /// One line at the current indentation; an empty `text` gives an empty line.
  void line(std::string_view text) {
    if (separated && !text.empty() && text.front() != '}')
      out += '\n';
    separated = false;
    if (!text.empty())
      out.append(2 * depth, ' ').append(text);
    out += '\n';
  }
  /// Puts an empty line before the next line, unless that line closes a block: stages read apart.
  void separate() { separated = true; }
  /// `// text`, for the stage comments the generated kernel is read by.
  void comment(std::string_view text) { line("// " + std::string(text)); }
  /// `head {` (a bare `{` for an empty head) and one more level of indentation.
  void open(std::string_view head) {
    line(head.empty() ? std::string("{") : std::string(head) + " {");
    ++depth;
  }
  /// `}` (plus `tail`, e.g. ";") one level up.
  void close(std::string_view tail = "") {
    --depth;
    line("}" + std::string(tail));
  }
  /// `#pragma unroll` then `for (int var = 0; var < bound; ++var) {`.
  void openUnrolledFor(std::string_view var, std::string_view bound) {
    line("#pragma unroll");
    std::string v(var);
    open("for (int " + v + " = 0; " + v + " < " + std::string(bound) + "; ++" + v + ")");
  }
  /// Verbatim text (a prelude, a nested writer's output), not re-indented.
  void raw(std::string_view text) { out.append(text); }

  const std::string &str() const { return out; }

private:
  std::string out;
  int depth = 0;
  bool separated = false;
};

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_CUDAWRITER_H

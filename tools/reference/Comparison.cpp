// Comparison.cpp — host dtype conversions and FlashAttention's acceptance rule.
#include "GpuReference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <tuple>

using namespace flashtile;
using namespace flashtile::reference;

namespace {

/// Every byte kPoisonByte: what an untouched element of O reads as.
constexpr uint16_t kPoisonBits = uint16_t(kPoisonByte) << 8 | kPoisonByte;

std::string position(long long b, long long i, long long h, long long d) {
  return "b=" + std::to_string(b) + " q=" + std::to_string(i) + " h=" + std::to_string(h) + " d=" + std::to_string(d);
}

} // namespace

float reference::bf16ToFloat(uint16_t bits) {
  uint32_t word = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

float reference::f16ToFloat(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(float(mantissa), -24); // zero or subnormal
  else if (exponent == 31)
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
  return sign ? -magnitude : magnitude;
}

float reference::lowToFloat(uint16_t bits, DType dtype) {
  return dtype == DType::BF16 ? bf16ToFloat(bits) : f16ToFloat(bits);
}

bool Comparison::pass() const {
  return referenceNans == 0 && nanCount == 0 && maskedNonzero == 0 && paddingWrites == 0 && lseBad == 0 &&
         errOurs <= tolerance;
}

std::string Comparison::ratioText() const {
  char text[32];
  if (errLowp > 0)
    std::snprintf(text, sizeof text, "%.3f", errOurs / errLowp);
  else
    std::snprintf(text, sizeof text, "%s", errOurs == 0 ? "0" : "inf");
  return text;
}

std::string Comparison::summary() const {
  char text[160];
  std::snprintf(text, sizeof text, "err_ours=%.3e err_lowp=%.3e ratio=%s lse_err=%.2e %s", errOurs, errLowp,
                ratioText().c_str(), errLse, pass() ? "PASS" : "FAIL");
  return text;
}

std::vector<std::string> Comparison::failures() const {
  std::vector<std::string> out;
  if (referenceNans)
    out.push_back("the reference produced " + std::to_string(referenceNans) +
                  " NaN values: a bug in the reference kernel, not in the kernel checked");
  if (nanCount)
    out.push_back("O has " + std::to_string(nanCount) + " NaN elements (unwritten output reads as NaN); first at " +
                  firstNan);
  if (maskedNonzero)
    out.push_back("fully masked rows must give O = 0; " + std::to_string(maskedNonzero) +
                  " elements are not, first at " + firstMasked);
  if (paddingWrites)
    out.push_back(std::to_string(paddingWrites) + " elements of O's padding (outside its rows) were written");
  if (errOurs > tolerance) {
    char text[160];
    std::snprintf(text, sizeof text, "max|out - ref_fp32| = %.3e exceeds %g*max|ref_lowp - ref_fp32| + %g = %.3e",
                  errOurs, kLowpErrorFactor, kAbsoluteSlack, tolerance);
    out.push_back(text + std::string("; worst at ") + worst);
  }
  if (lseBad)
    out.push_back(std::to_string(lseBad) + " LSE values are off by more than " + std::to_string(kLseTolerance) +
                  " (or not -inf on fully masked rows); first " + firstLseBad);
  return out;
}

StatusOr<Comparison> reference::compare(const AttentionArgs &args, const std::vector<uint16_t> &oRaw,
                                        const std::vector<float> &lse, const ReferenceOutputs &fp32,
                                        const ReferenceOutputs &lowp) {
  const long long B = args.batch, Sq = args.seqlenQ, Hq = args.headsQ, D = args.headDimV;
  if (B < 0 || Sq < 0 || Hq < 0 || D < 0)
    return Status::error("compare: negative tensor size");
  const size_t rows = size_t(B * Sq * Hq);
  for (auto [values, expected, what] : {std::tuple{&lse, rows, "lse"},
                                        {&fp32.lse, rows, "fp32 reference lse"},
                                        {&lowp.lse, rows, "lowp reference lse"},
                                        {&fp32.o, rows * D, "fp32 reference O"},
                                        {&lowp.o, rows * D, "lowp reference O"}})
    if (values->size() != expected)
      return Status::error(std::string("compare: ") + what + " has " + std::to_string(values->size()) +
                           " elements, expected " + std::to_string(expected));
  const auto &s = args.oStride;
  if (rows > 0 && D > 0) {
    const long long last = (B - 1) * s[0] + (Sq - 1) * s[1] + (Hq - 1) * s[2] + (D - 1) * s[3];
    if (s[0] < 0 || s[1] < 0 || s[2] < 0 || s[3] < 0 || size_t(last) >= oRaw.size())
      return Status::error("compare: O's strides reach element " + std::to_string(last) + " of " +
                           std::to_string(oRaw.size()));
  }

  Comparison c;
  for (const std::vector<float> *values : {&fp32.o, &lowp.o, &fp32.lse})
    c.referenceNans += std::count_if(values->begin(), values->end(), [](float x) { return std::isnan(x); });

  // O: walk the logical elements, marking which raw elements they are so that padding can be checked after.
  std::vector<unsigned char> logical(oRaw.size(), 0);
  for (long long b = 0; b < B; ++b)
    for (long long i = 0; i < Sq; ++i)
      for (long long h = 0; h < Hq; ++h) {
        const size_t row = size_t((b * Sq + i) * Hq + h);
        const bool masked = std::isinf(fp32.lse[size_t((b * Hq + h) * Sq + i)]);
        for (long long d = 0; d < D; ++d) {
          const size_t at = size_t(b * s[0] + i * s[1] + h * s[2] + d * s[3]);
          logical[at] = 1;
          const double ours = lowToFloat(oRaw[at], args.dtype);
          const double ref = fp32.o[row * D + d];
          const double low = lowp.o[row * D + d];
          if (std::isnan(ours)) {
            if (c.nanCount++ == 0)
              c.firstNan = position(b, i, h, d);
            continue;
          }
          if (masked && ours != 0.0 && c.maskedNonzero++ == 0)
            c.firstMasked = position(b, i, h, d) + " (" + std::to_string(ours) + ")";
          const double err = std::fabs(ours - ref);
          if (err > c.errOurs || std::isinf(err)) {
            c.errOurs = err;
            c.worst = position(b, i, h, d) + " ours=" + std::to_string(ours) + " ref=" + std::to_string(ref);
          }
          c.errLowp = std::max(c.errLowp, std::fabs(low - ref));
        }
      }
  for (size_t at = 0; at < oRaw.size(); ++at)
    if (!logical[at] && oRaw[at] != kPoisonBits)
      ++c.paddingWrites;

  // LSE: within kLseTolerance of the fp32 reference; -inf exactly where the reference's row is fully masked.
  for (size_t r = 0; r < lse.size(); ++r) {
    const double ours = lse[r], ref = fp32.lse[r];
    const bool ok = std::isinf(ref) ? (std::isinf(ours) && ours < 0)
                                    : (std::isfinite(ours) && std::fabs(ours - ref) <= kLseTolerance);
    if (std::isfinite(ours) && std::isfinite(ref))
      c.errLse = std::max(c.errLse, std::fabs(ours - ref));
    if (!ok && c.lseBad++ == 0) {
      const size_t b = r / size_t(Hq * Sq), h = r / size_t(Sq) % size_t(Hq), i = r % size_t(Sq);
      c.firstLseBad = "b=" + std::to_string(b) + " h=" + std::to_string(h) + " q=" + std::to_string(i) +
                      " ours=" + std::to_string(ours) + " ref=" + std::to_string(ref);
    }
  }

  c.tolerance = kLowpErrorFactor * c.errLowp + kAbsoluteSlack;
  return c;
}

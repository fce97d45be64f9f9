// InvertKvRangeTest.cpp — the query rows the backward visits for a K/V tile (passes/Transforms/InvertKvRange.h),
// checked by brute force against each built-in variant's mask: no row that attends a key of the tile is left out
// of the `may` rows, every `full` row attends all of the tile's keys, and where the rules are invertible (every
// variant but document_mask's document starts) both are exact.
#include "BackwardTestSupport.h"

#include "interpreter/HookEvaluator.h"
#include "passes/Transforms/InvertKvRange.h"

#include <algorithm>
#include <memory>

using namespace mlir;
using namespace flashtile;
using namespace flashtile::backward_test;

namespace {

constexpr int kBlockM = 4; // Q tiles of 4 rows: at the test's 1 to 13 rows, tiles partial, whole and several

/// The converse of a variant's rules for the keys [k0, k1] of (b, h), built in a block of its own whose arguments
/// are (k0, k1, b, h): the rows of each rule and the Q tiles of kBlockM rows.
struct Inverse {
  std::unique_ptr<Block> block;
  tile::QueryRows may, full;
  tile::QueryTiles tiles;
};

Inverse invert(tile::KvRangeOp may, tile::KvRangeOp full) {
  Inverse out{std::make_unique<Block>(), {}, {}, {}};
  Type i32 = IntegerType::get(may.getContext(), 32);
  for (int i = 0; i < 4; ++i)
    out.block->addArgument(i32, may.getLoc());
  OpBuilder b(may.getContext()); // the block has no parent region to take the context from
  b.setInsertionPointToEnd(out.block.get());
  ValueRange args = out.block->getArguments();
  out.may = tile::buildQueryRows(b, may, args[0], args[1], args[2], args[3]);
  out.full = tile::buildQueryRows(b, full, args[0], args[1], args[2], args[3]);
  out.tiles = tile::buildQueryTiles(b, out.may, out.full, kBlockM);
  return out;
}

/// A half-open range of rows or tiles.
struct Span {
  int64_t lo = 0, hi = 0;
  bool operator==(const Span &) const = default;
  bool empty() const { return lo >= hi; }
  friend void PrintTo(const Span &s, std::ostream *os) { *os << "[" << s.lo << ", " << s.hi << ")"; }
};

/// `got` is `want`, or both are empty (an empty converse may sit anywhere).
void expectSpan(const char *what, const Span &got, const Span &want) {
  if (want.empty())
    EXPECT_TRUE(got.empty()) << what;
  else
    EXPECT_EQ(got, want) << what;
}

/// One evaluation: may rows, full rows, may tiles, full tiles.
struct Evaluated {
  Span may, full, tiles, fullTiles;
};

Evaluated evaluate(interp::HookEvaluator &eval, Inverse &inverse, int k0, int k1, int b, int h) {
  using interp::WideScalar;
  WideScalar args[] = {WideScalar::integer(k0), WideScalar::integer(k1), WideScalar::integer(b),
                       WideScalar::integer(h)};
  EXPECT_TRUE(succeeded(eval.run(*inverse.block, args)));
  auto at = [&](Value v) { return eval.value(v).i; };
  const tile::QueryTiles &t = inverse.tiles;
  return {{at(inverse.may.lo), at(inverse.may.hi)},
          {at(inverse.full.lo), at(inverse.full.hi)},
          {at(t.lo), at(t.hi)},
          {at(t.fullLo), at(t.fullHi)}};
}

/// The first and one-past-last of [0, count) where `pred` holds, {0, 0} when it holds nowhere.
template <typename Pred> Span spanWhere(int count, Pred pred) {
  Span r{count, -1};
  for (int x = 0; x < count; ++x)
    if (pred(x)) {
      r.lo = std::min<int64_t>(r.lo, x);
      r.hi = x + 1;
    }
  return r.hi < 0 ? Span{0, 0} : r;
}

void checkVariant(const std::string &name, Form form) {
  Variant variant = *variants::byName(name);
  MLIRContext context;
  OwningOpRef<ModuleOp> module = programOf(context, variant, form);
  ASSERT_TRUE(module);
  tile::KvRangeOp may, full;
  for (tile::KvRangeOp rule : funcOf(*module).getBody().getOps<tile::KvRangeOp>())
    (rule.getKind() == tile::RangeKind::May ? may : full) = rule;
  tile::MaskOp mask;
  funcOf(*module).walk([&](tile::MaskOp op) { mask = op; });
  ASSERT_TRUE(may && full && mask);
  Inverse inverse = invert(may, full);
  // Only document starts (an input array) cannot be inverted: that side stays every row, and no row is "full".
  bool documents = name == "document_mask";
  EXPECT_TRUE(inverse.may.exactLo);
  EXPECT_EQ(inverse.may.exactHi, !documents);
  EXPECT_EQ(inverse.full.exactLo && inverse.full.exactHi, !documents);

  const int shapes[][2] = {{1, 1}, {5, 9}, {9, 5}, {8, 8}, {13, 6}};
  for (auto [seqlenQ, seqlenK] : shapes) {
    Shape shape{2, seqlenQ, seqlenK, 2, 1, 1, 1};
    std::mt19937_64 rng(seqlenQ * 31 + seqlenK);
    interp::ReferenceProblem p = problemFor(variant, shape, rng);
    interp::HookEnv env{shape.batch, shape.headsQ, shape.headsKv, seqlenQ, seqlenK, 0, 1.0, {}, {}};
    for (size_t i = 0; i < p.params.size(); ++i)
      env.params[variant.params()[i].first] = p.params[i];
    for (size_t i = 0; i < p.inputs.size(); ++i)
      env.inputs[variant.inputs()[i].first] = p.inputs[i];
    interp::HookEvaluator eval(env);
    int qTiles = (seqlenQ + kBlockM - 1) / kBlockM;
    for (int b = 0; b < shape.batch; ++b) {
      env.keyOffset = int64_t{b} * seqlenK;
      for (int h = 0; h < shape.headsQ; ++h) {
        std::vector<std::vector<char>> sees(seqlenQ, std::vector<char>(seqlenK));
        for (int q = 0; q < seqlenQ; ++q)
          for (int kv = 0; kv < seqlenK; ++kv) {
            interp::WideScalar coords[] = {interp::WideScalar::integer(b), interp::WideScalar::integer(h),
                                           interp::WideScalar::integer(q), interp::WideScalar::integer(kv)};
            auto keep = eval.yielded(mask.getBody().front(), coords);
            ASSERT_TRUE(succeeded(keep));
            sees[q][kv] = (*keep)[0].isTrue();
          }
        for (int width : {1, 3, 4})
          for (int k0 = 0; k0 < seqlenK; k0 += width) {
            int k1 = std::min(k0 + width, seqlenK) - 1;
            SCOPED_TRACE(name + ": Sq " + std::to_string(seqlenQ) + ", Sk " + std::to_string(seqlenK) + ", b " +
                         std::to_string(b) + ", h " + std::to_string(h) + ", keys [" + std::to_string(k0) + ", " +
                         std::to_string(k1) + "]");
            auto anyKey = [&](int q) {
              return std::any_of(&sees[q][k0], &sees[q][k1] + 1, [](char x) { return x != 0; });
            };
            auto allKeys = [&](int q) {
              return std::all_of(&sees[q][k0], &sees[q][k1] + 1, [](char x) { return x != 0; });
            };
            auto rowsOf = [&](int t) { return std::pair{t * kBlockM, std::min((t + 1) * kBlockM, seqlenQ)}; };
            auto tileAny = [&](int t) {
              auto [first, end] = rowsOf(t);
              for (int q = first; q < end; ++q)
                if (anyKey(q))
                  return true;
              return false;
            };
            auto tileAll = [&](int t) {
              auto [first, end] = rowsOf(t);
              for (int q = first; q < end; ++q)
                if (!allKeys(q))
                  return false;
              return true;
            };
            Evaluated got = evaluate(eval, inverse, k0, k1, b, h);
            for (Span span : {got.may, got.full})
              ASSERT_TRUE(0 <= span.lo && span.lo <= span.hi && span.hi <= seqlenQ) << span.lo << ", " << span.hi;
            ASSERT_TRUE(0 <= got.tiles.lo && got.tiles.lo <= got.fullTiles.lo && got.fullTiles.lo <= got.fullTiles.hi &&
                        got.fullTiles.hi <= got.tiles.hi && got.tiles.hi <= qTiles);
            // Safe: no attending row or tile is left out; every row or tile said to be full is.
            for (int q = 0; q < seqlenQ; ++q)
              EXPECT_TRUE(!anyKey(q) || (got.may.lo <= q && q < got.may.hi)) << "row " << q << " is left out";
            for (int64_t q = got.full.lo; q < got.full.hi; ++q)
              EXPECT_TRUE(allKeys(q)) << "row " << q << " is said to attend every key of the tile";
            for (int t = 0; t < qTiles; ++t)
              EXPECT_TRUE(!tileAny(t) || (got.tiles.lo <= t && t < got.tiles.hi)) << "Q tile " << t << " is left out";
            for (int64_t t = got.fullTiles.lo; t < got.fullTiles.hi; ++t)
              EXPECT_TRUE(tileAll(t)) << "Q tile " << t << " is said to need no mask";
            if (documents)
              continue;
            // Exact: the attending rows and tiles are an interval, and the converse is that interval.
            expectSpan("may rows", got.may, spanWhere(seqlenQ, anyKey));
            expectSpan("full rows", got.full, spanWhere(seqlenQ, allKeys));
            expectSpan("may tiles", got.tiles, spanWhere(qTiles, tileAny));
            expectSpan("full tiles", got.fullTiles, spanWhere(qTiles, tileAll));
          }
      }
    }
  }
}

class InvertKvRangeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InvertKvRangeTest, CoversEveryAttendingRow) {
  for (Form form : {Form::AsBuilt, Form::Canonical}) {
    SCOPED_TRACE(form == Form::Canonical ? "canonicalized" : "as built");
    checkVariant(GetParam(), form);
  }
}

INSTANTIATE_TEST_SUITE_P(BuiltinVariants, InvertKvRangeTest, ::testing::ValuesIn(variants::names()),
                         [](const auto &info) { return info.param; });

} // namespace

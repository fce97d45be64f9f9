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

/// Rows [lo, hi) as built for one rule, in a block of their own whose arguments are (k0, k1, b, h).
struct Inverse {
  std::unique_ptr<Block> block;
  tile::QueryRows rows;
};

Inverse invert(tile::KvRangeOp rule) {
  Inverse out{std::make_unique<Block>(), {}};
  Type i32 = IntegerType::get(rule.getContext(), 32);
  for (int i = 0; i < 4; ++i)
    out.block->addArgument(i32, rule.getLoc());
  OpBuilder b(rule.getContext()); // the block has no parent region to take the context from
  b.setInsertionPointToEnd(out.block.get());
  ValueRange args = out.block->getArguments();
  out.rows = tile::buildQueryRows(b, rule, args[0], args[1], args[2], args[3]);
  return out;
}

/// The rows of one evaluation.
struct Rows {
  int64_t lo = 0, hi = 0;
};

Rows evaluate(interp::HookEvaluator &eval, Inverse &inverse, int k0, int k1, int b, int h) {
  using interp::WideScalar;
  WideScalar args[] = {WideScalar::integer(k0), WideScalar::integer(k1), WideScalar::integer(b),
                       WideScalar::integer(h)};
  EXPECT_TRUE(succeeded(eval.run(*inverse.block, args)));
  return {eval.value(inverse.rows.lo).i, eval.value(inverse.rows.hi).i};
}

/// The first and one-past-last row for which `pred` holds, {0, 0} when none does.
template <typename Pred> Rows rowsWhere(int seqlenQ, Pred pred) {
  Rows r{seqlenQ, -1};
  for (int q = 0; q < seqlenQ; ++q)
    if (pred(q)) {
      r.lo = std::min<int64_t>(r.lo, q);
      r.hi = q + 1;
    }
  return r.hi < 0 ? Rows{0, 0} : r;
}

void checkVariant(const std::string &name) {
  Variant variant = *variants::byName(name);
  MLIRContext context;
  OwningOpRef<ModuleOp> module = programOf(context, variant);
  ASSERT_TRUE(module);
  tile::KvRangeOp may, full;
  for (tile::KvRangeOp rule : funcOf(*module).getBody().getOps<tile::KvRangeOp>())
    (rule.getKind() == tile::RangeKind::May ? may : full) = rule;
  tile::MaskOp mask;
  funcOf(*module).walk([&](tile::MaskOp op) { mask = op; });
  ASSERT_TRUE(may && full && mask);
  Inverse mayRows = invert(may), fullRows = invert(full);
  // Only document starts (an input array) cannot be inverted: that side stays every row, and no row is "full".
  bool documents = name == "document_mask";
  EXPECT_TRUE(mayRows.rows.exactLo);
  EXPECT_EQ(mayRows.rows.exactHi, !documents);
  EXPECT_EQ(fullRows.rows.exactLo && fullRows.rows.exactHi, !documents);

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
            auto anyKey = [&](int q) { return std::any_of(&sees[q][k0], &sees[q][k1] + 1, [](char x) { return x != 0; }); };
            auto allKeys = [&](int q) { return std::all_of(&sees[q][k0], &sees[q][k1] + 1, [](char x) { return x != 0; }); };
            Rows rows = evaluate(eval, mayRows, k0, k1, b, h);
            ASSERT_TRUE(0 <= rows.lo && rows.lo <= rows.hi && rows.hi <= seqlenQ) << rows.lo << ", " << rows.hi;
            for (int q = 0; q < seqlenQ; ++q)
              EXPECT_TRUE(!anyKey(q) || (rows.lo <= q && q < rows.hi))
                  << "row " << q << " attends the tile but is left out";
            Rows needed = rowsWhere(seqlenQ, anyKey);
            if (!documents && needed.lo < needed.hi) {
              EXPECT_EQ(rows.lo, needed.lo);
              EXPECT_EQ(rows.hi, needed.hi);
            } else if (!documents) {
              EXPECT_EQ(rows.lo, rows.hi) << "no row attends the tile";
            }
            Rows fullyRows = evaluate(eval, fullRows, k0, k1, b, h);
            ASSERT_TRUE(0 <= fullyRows.lo && fullyRows.lo <= fullyRows.hi && fullyRows.hi <= seqlenQ);
            for (int64_t q = fullyRows.lo; q < fullyRows.hi; ++q)
              EXPECT_TRUE(allKeys(q)) << "row " << q << " is said to attend every key of the tile";
            Rows complete = rowsWhere(seqlenQ, allKeys);
            if (!documents && complete.lo < complete.hi) {
              EXPECT_EQ(fullyRows.lo, complete.lo);
              EXPECT_EQ(fullyRows.hi, complete.hi);
            }
          }
      }
    }
  }
}

class InvertKvRangeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InvertKvRangeTest, CoversEveryAttendingRow) { checkVariant(GetParam()); }

INSTANTIATE_TEST_SUITE_P(BuiltinVariants, InvertKvRangeTest, ::testing::ValuesIn(variants::names()),
                         [](const auto &info) { return info.param; });

} // namespace

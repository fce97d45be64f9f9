//===- LaunchPlanner.cpp - the launch plan of a printed module -----------===//
#include "codegen/common/LaunchPlanner.h"
#include "flashtile/runtime/KernelAbi.h"

#include <algorithm>
#include <cassert>

using namespace flashtile;

namespace {

PlanExpr rule(const std::string &text) {
  StatusOr<PlanExpr> parsed = PlanExpr::parse(text);
  assert(parsed.ok() && "the planner writes rules the runtime parses");
  return parsed.ok() ? *parsed : PlanExpr();
}

std::string str(long long value) { return std::to_string(value); }

/// Bytes rounded up to the runtime's workspace alignment (SplitKv.h: splitKvWorkspaceBytes lays partials out so).
std::string aligned(const std::string &bytes) { return "cdiv(" + bytes + ", 256) * 256"; }

} // namespace

LaunchPlan flashtile::codegen::planLaunches(const ModuleFacts &f) {
  LaunchPlan plan;
  const std::string qTiles = "cdiv(rows, " + str(f.blockM) + ")";
  PlanLaunch main;
  main.entry = f.entry;
  main.threads = f.threads;
  main.smemBytes = f.smemBytes;
  main.grid = {rule(qTiles), rule("heads_q"), rule("batch")};
  if (f.tensorMaps)
    main.tensorMaps = {{"q", f.blockM, f.tensorMapSwizzle}, {"k", f.blockN, f.tensorMapSwizzle},
                       {"v", f.blockN, f.tensorMapSwizzle}};
  if (f.ctaPair) {
    // A cluster of two CTAs along x, over an even number of Q tiles (a pair's second tile may lie past the rows);
    // each CTA copies half of a K/V tile's rows a box.
    main.grid[0] = rule("cdiv(" + qTiles + ", 2) * 2");
    main.cluster = {2, 1, 1};
    for (PlanTensorMap &map : main.tensorMaps)
      if (map.tensor != "q")
        map.boxRows = f.blockN / 2;
  }

  if (f.persistent) {
    // One block an SM at most, never more blocks than units: two Q tiles of one (batch, head) pair each, or one
    // Q tile each when the blocks take them from the counter.
    const std::string units = f.dynamicWork ? qTiles + " * heads_q * batch" : "cdiv(" + qTiles + ", 2) * heads_q * batch";
    main.grid = {rule("min(" + units + ", max(sms, 1))"), rule("1"), rule("1")};
    plan.set.emplace_back("qTiles", rule(qTiles));
    if (f.dynamicWork)
      plan.workspaces.push_back({"tile_counter", PlanExpr::constant(4), std::nullopt, /*zeroed=*/true,
                                 {{"tileCounter", PlanExpr::constant(0)}}});
  }
  if (f.kvSteps) {
    // One launch per K/V tile of the longest sequence (one when there is no key); each LSE row's state (acc, then
    // the running max, then the running sum) waits in the workspace between launches.
    main.repeat = rule("max(1, cdiv(keys, " + str(f.blockN) + "))");
    main.repeatField = "kvStep";
    plan.workspaces.push_back({"state", rule("lse_rows * (head_dim_v + 2) * 4"), std::nullopt, /*zeroed=*/false,
                               {{"stateAcc", PlanExpr::constant(0)},
                                {"stateMax", rule("lse_rows * head_dim_v * 4")},
                                {"stateSum", rule("lse_rows * (head_dim_v + 1) * 4")}}});
  }
  if (!f.transposeVEntry.empty()) {
    // Vᵀ images of headDimV x blockN bytes, one per key tile and K/V head: sequence b's tile j is image
    // (keyOffset_b / blockN + b + j) (Fp8Abi.h), so cdiv(key_rows, blockN) + batch images per K/V head hold every
    // sequence's tiles, dense or varlen, without reading cu_seqlens on the host.
    PlanLaunch transpose;
    transpose.entry = f.transposeVEntry;
    transpose.threads = f.transposeVThreads;
    transpose.grid = {rule("cdiv(keys, " + str(f.blockN) + ")"), rule("heads_kv"), rule("batch")};
    plan.launches.push_back(transpose);
    plan.workspaces.push_back({"v_transposed",
                               rule("(cdiv(key_rows, " + str(f.blockN) + ") + batch) * heads_kv * head_dim_v * " +
                                    str(f.blockN)),
                               std::nullopt,
                               /*zeroed=*/false,
                               {{"vTransposed", PlanExpr::constant(0)}}});
  }
  if (!f.appendEntry.empty()) {
    PlanLaunch append;
    append.entry = f.appendEntry;
    append.threads = f.appendThreads;
    append.grid = {rule("cdiv(new_rows * (head_dim + head_dim_v) / " + str(f.appendChunkElements) + ", " +
                        str(f.appendThreads) + ")"),
                   rule("heads_kv"), rule("batch")};
    append.when = rule("new_rows > 0");
    plan.launches.push_back(append);
    // Both kernels report the first out-of-range cache_seqlens, cache_batch_idx or block_table value they clamp
    // to the runtime's error record (KernelAbi.h: FlashtileKvError), which outlives the call.
    PlanWorkspace errors{"kv_errors",
                         PlanExpr::constant(sizeof(FlashtileKvError)),
                         std::nullopt,
                         /*zeroed=*/false,
                         {{"kvErrors", PlanExpr::constant(0)}}};
    errors.errorRecord = true;
    plan.workspaces.push_back(errors);
  }
  if (!f.combineEntry.empty()) {
    // The key range of each Q tile is split over `splits` blocks (the split fastest in grid.x); with more than
    // one, the splits' fp32 partials go to the workspace and the combine kernel merges them.
    const std::string rows = f.packQueryHeads ? "rows * (heads_q / heads_kv)" : "rows";
    const std::string heads = f.packQueryHeads ? "heads_kv" : "heads_q";
    const std::string tiles = "cdiv(" + rows + ", " + str(f.blockM) + ")";
    main.grid = {rule(tiles + " * splits"), rule(heads), rule("batch")};
    plan.splits = PlanSplits{rule(tiles + " * " + heads + " * batch"), rule("cdiv(keys, " + str(f.blockN) + ")"),
                             static_cast<int>(plan.launches.size())};
    plan.set.emplace_back("numSplits", rule("splits"));
    plan.set.emplace_back("accumSplitStride", rule("lse_rows"));
    const std::string accBytes = aligned("splits * lse_rows * head_dim_v * 4");
    plan.workspaces.push_back({"partials", rule(accBytes + " + " + aligned("splits * lse_rows * 4")),
                               rule("splits > 1"), /*zeroed=*/false,
                               {{"oAccum", PlanExpr::constant(0)}, {"lseAccum", rule(accBytes)}}});
    plan.launches.push_back(main);
    PlanLaunch combine;
    combine.entry = f.combineEntry;
    combine.threads = f.combineThreads;
    combine.grid = {rule("cdiv(rows, " + str(f.combineRows) + ")"), rule("heads_q"), rule("batch")};
    combine.when = rule("splits > 1");
    // The combine grid may start while the attention grid's last blocks write their partials: it waits for that
    // grid in griddepcontrol.wait.
    combine.dependent = f.dependentLaunch;
    plan.launches.push_back(combine);
    return plan;
  }
  plan.launches.push_back(main);
  return plan;
}

LaunchPlan flashtile::codegen::planBackwardLaunches(const BackwardFacts &f) {
  LaunchPlan plan;
  auto launch = [&](const std::string &entry, const std::string &tiles, int smem, int threads) {
    PlanLaunch l;
    l.entry = entry;
    l.threads = threads;
    l.smemBytes = smem;
    // One block at least: a call without queries still writes dK = dV = 0, one without keys dQ = 0.
    l.grid = {rule("max(1, " + tiles + ")"), rule("heads_q"), rule("batch")};
    return l;
  };
  plan.launches.push_back(launch(f.preprocessEntry, "cdiv(rows, " + str(f.blockM) + ")", 0, f.threads));
  plan.launches.push_back(launch(f.mainEntry, "cdiv(keys, " + str(f.blockN) + ")", f.mainSmemBytes,
                                 std::max(f.mainThreads, f.threads)));
  if (f.tensorMaps)
    plan.launches.back().tensorMaps = {{"q", f.blockM, f.tensorMapSwizzle}, {"k", f.blockN, f.tensorMapSwizzle},
                                       {"v", f.blockN, f.tensorMapSwizzle}, {"do", f.blockM, f.tensorMapSwizzle}};
  plan.launches.push_back(launch(f.postprocessEntry, "cdiv(max(rows, keys), " + str(f.blockM) + ")", 0, f.threads));
  plan.workspaces.push_back(
      {"delta", rule(aligned("lse_rows * 4")), std::nullopt, /*zeroed=*/false, {{"delta", PlanExpr::constant(0)}}});
  plan.workspaces.push_back({"dq_accum",
                             rule(aligned("lse_rows * head_dim * 4")),
                             std::nullopt,
                             /*zeroed=*/true,
                             {{"dqAccum", PlanExpr::constant(0)}}});
  // GQA/MQA: the query heads of a group add their dK and dV into fp32 rows of the K/V head, which the postprocess
  // converts.
  const std::string dkBytes = aligned("key_rows * heads_kv * head_dim * 4");
  plan.workspaces.push_back({"dkv_accum",
                             rule(dkBytes + " + " + aligned("key_rows * heads_kv * head_dim_v * 4")),
                             rule("heads_q > heads_kv"),
                             /*zeroed=*/true,
                             {{"dkAccum", PlanExpr::constant(0)}, {"dvAccum", rule(dkBytes)}}});
  const std::string qTiles = "max(1, cdiv(rows, " + str(f.blockM) + "))";
  const std::string kvTiles = "max(1, cdiv(keys, " + str(f.blockN) + "))";
  plan.set.emplace_back("qTiles", rule(qTiles));
  plan.set.emplace_back("kvTiles", rule(kvTiles));
  // Deterministic calls: the blocks add into dQ (and GQA's dK/dV) in a fixed order, counted by these semaphores.
  plan.workspaces.push_back({"semaphores",
                             rule(aligned("(batch * heads_q * " + qTiles + " + (heads_q > heads_kv) * batch * heads_kv * " +
                                          kvTiles + ") * 4")),
                             rule("deterministic"),
                             /*zeroed=*/true,
                             {{"semaphores", PlanExpr::constant(0)}}});
  if (f.inputGradsEntry.empty())
    return plan;
  // Input gradients: each block's share, one number per read, summed by one block in a fixed order. Blocks that own
  // no rows (varlen) leave theirs zero.
  const std::string shares = "batch * heads_q * (" + str(f.mainInputTerms) + " * " + kvTiles + " + " +
                             str(f.preprocessInputTerms) + " * " + qTiles + ")";
  plan.workspaces.push_back({"input_grad_partials", rule(aligned(shares + " * 4")), std::nullopt, /*zeroed=*/true,
                             {{"inputGradPartials", PlanExpr::constant(0)}}});
  PlanLaunch sum;
  sum.entry = f.inputGradsEntry;
  sum.threads = f.threads;
  sum.grid = {rule("1"), rule("1"), rule("1")};
  plan.launches.push_back(sum);
  return plan;
}

// DP and FSDP on the simulator: the specified cases at 1..9 ranks, and random shapes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "distmm/simulator.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<StrategyCase, const Strategy*, int>;

class SimStrategy : public ::testing::TestWithParam<Param> {};

TEST_P(SimStrategy, MatchesSingleProcess) {
  const auto& [c, strategy, ranks] = GetParam();
  run_simulated(ranks, [&](Communicator& comm) { c.run(comm, *strategy); });
}

INSTANTIATE_TEST_SUITE_P(Cases, SimStrategy,
                         ::testing::Combine(::testing::ValuesIn(strategy_cases().begin(),
                                                                strategy_cases().end()),
                                            ::testing::ValuesIn(strategy_pointers()),
                                            ::testing::Values(1, 2, 3, 4, 5, 8, 9)),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  test_name(*std::get<1>(p.param)) + "_" +
                                  std::to_string(std::get<2>(p.param)) + "ranks";
                         });

// Property: random shapes (each dimension 1..40) on 1..9 ranks, every strategy, integer
// inputs, results exactly equal to A * B.
TEST(SimStrategyHsdp, EveryMeshOfOneToEightRanks) {
  for (int ranks = 1; ranks <= 8; ++ranks) run_simulated(ranks, hsdp_every_mesh);
}

TEST(SimStrategyProperty, RandomShapesAndRankCountsAreExact) {
  std::mt19937 rng(2026);
  std::uniform_int_distribution<std::size_t> dim(1, 40);
  std::uniform_int_distribution<int> rank_count(1, 9);
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t m = dim(rng), k = dim(rng), n = dim(rng);
    const int ranks = rank_count(rng);
    const auto a = integer_matrix<double>(m, k, static_cast<unsigned>(trial));
    const auto b = integer_matrix<double>(k, n, static_cast<unsigned>(trial) + 1000);
    for (const Strategy& s : all_strategies()) {
      SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::string(s.name()) + " on " +
                   std::to_string(ranks) + " ranks, " + std::to_string(m) + "x" +
                   std::to_string(k) + " @ " + std::to_string(k) + "x" + std::to_string(n));
      run_simulated(
          ranks, [&](Communicator& comm) { expect_matches_single_process(comm, s, a, b, true); });
    }
  }
}

}  // namespace
}  // namespace distmm::testing

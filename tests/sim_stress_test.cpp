// Many random runs on the simulator with every message delayed at random: all exact, none
// hung. DISTMM_SOAK_RUNS=N runs N instead of the CI-sized 1000.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "distmm/simulator.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {
namespace {

TEST(SimStress, RandomRunsWithDelaysAreExact) {
  int runs = 1000;
  if (const char* soak = std::getenv("DISTMM_SOAK_RUNS")) runs = std::atoi(soak);
  std::mt19937 rng(77);
  std::uniform_int_distribution<std::size_t> dim(1, 24);
  std::uniform_int_distribution<int> rank_count(1, 9);
  const StrategyList strategies = all_strategies();
  std::uniform_int_distribution<std::size_t> pick(0, strategies.size() - 1);
  for (int run = 0; run < runs; ++run) {
    const std::size_t m = dim(rng), k = dim(rng), n = dim(rng);
    const int ranks = rank_count(rng);
    const Strategy& s = strategies[pick(rng)];
    const auto a = integer_matrix<double>(m, k, static_cast<unsigned>(run));
    const auto b = integer_matrix<double>(k, n, static_cast<unsigned>(run) + 7);
    const std::string fault = "delay:1:" + std::to_string(run);
    SCOPED_TRACE("run " + std::to_string(run) + ": " + std::string(s.name()) + " on " +
                 std::to_string(ranks) + " ranks, m=" + std::to_string(m) +
                 " k=" + std::to_string(k) + " n=" + std::to_string(n) + ", " + fault);
    run_simulated(ranks, [&](Communicator& comm) {
      comm.inject(parse_fault(fault));
      expect_matches_single_process(comm, s, a, b, true);
    });
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace distmm::testing

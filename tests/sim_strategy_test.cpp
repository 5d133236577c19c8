// DP and FSDP on the simulator: the specified cases at 1..9 ranks, and random shapes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "distmm/error.hpp"
#include "distmm/simulator.hpp"
#include "distmm/strategy_of.hpp"
#include "strategy/grid_cases.hpp"
#include "strategy/layout_cases.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<StrategyCase, const Strategy*, int>;

class SimStrategy : public ::testing::TestWithParam<Param> {};

TEST_P(SimStrategy, MatchesSingleProcess) {
  const StrategyCase& c = std::get<0>(GetParam());
  const Strategy& strategy = *std::get<1>(GetParam());
  run_simulated(std::get<2>(GetParam()), [&](Communicator& comm) { c.run(comm, strategy); });
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
// A second strategy named "dp": the registry refuses it.
struct Twin final : StrategyOf<Twin> {
  std::string_view name() const override { return "dp"; }
  std::string_view description() const override { return "a second dp"; }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator&, const MatmulShape&, const arma::Mat<T>&,
                                           int, const StrategySettings&) const {
    return nullptr;
  }
};

// The registry: lookups by name, one strategy per name, the training ones, and a strategy's own
// option settled for the run (hsdp's replicas: given, or one group per host where the hosts
// divide the ranks).
TEST(Registry, LooksUpByNameAndSettlesOptions) {
  EXPECT_EQ(find_strategy("fsdp"), &strategy("fsdp"));
  EXPECT_EQ(find_strategy("no-such"), nullptr);
  try {
    strategy("no-such");
    ADD_FAILURE() << "an unknown name is an input error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--strategy 'no-such'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tp-row"), std::string::npos) << e.what();
  }
  std::vector<std::string> training;
  for (const Strategy& s : training_strategies()) training.emplace_back(s.name());
  EXPECT_EQ(training, (std::vector<std::string>{"dp", "fsdp", "hsdp", "tp-col", "grid"}));

  EXPECT_THROW(register_strategy(std::make_unique<Twin>()), InputError);
  EXPECT_FALSE(Twin().trains());

  const Strategy& hsdp = strategy("hsdp");
  EXPECT_EQ(hsdp.settle({}, {4, 2}), (StrategySettings{{"replicas", "2"}}));
  EXPECT_EQ(hsdp.settle({}, {3, 2}), (StrategySettings{{"replicas", "1"}}));
  EXPECT_EQ(hsdp.settle({{"replicas", "4"}}, {4, 1}), (StrategySettings{{"replicas", "4"}}));
  EXPECT_THROW(hsdp.settle({{"replicas", "3"}}, {4, 1}), InputError);
  EXPECT_THROW(hsdp.settle({{"replicas", "two"}}, {4, 1}), InputError);
  EXPECT_EQ(hsdp.label({{"replicas", "2"}}), "hsdp R=2");
  EXPECT_TRUE(strategy("dp").settle({{"replicas", "2"}}, {4, 2}).empty()) << "not dp's option";
  EXPECT_EQ(strategy("tp-col").label({}), "tp-col");
}

TEST(SimStrategyHsdp, EveryMeshOfOneToEightRanks) {
  for (int ranks = 1; ranks <= 8; ++ranks) run_simulated(ranks, hsdp_every_mesh);
}

TEST(SimStrategyLayout, DistributedOnOneToSixRanks) {
  for (int ranks = 1; ranks <= 6; ++ranks) {
    run_simulated(ranks, [](Communicator& comm) {
      EXPECT_EQ(distributed_layout_every_strategy(comm),
                static_cast<int>(all_strategies().size()));  // every one
    });
  }
}

TEST(SimStrategyGrid, EveryGridOfOneToEightRanks) {
  for (int ranks = 1; ranks <= 8; ++ranks)
    run_simulated(ranks, [](Communicator& comm) { grid_every_grid(comm); });
}

// Larger worlds: 12 ranks' grids of all of them; 64 threads' 3-D 4x4x4, 2.5-D
// 4x4x2 (half idle), SUMMA 8x8x1 and 3x5x4 (4 idle), in both layouts.
TEST(SimStrategyGrid, GridsOfTwelveAndSixtyFourRanks) {
  run_simulated(12, [](Communicator& comm) { grid_every_grid(comm, 0); });
  run_simulated(64, [](Communicator& comm) {
    for (const char* g : {"4x4x4", "4x4x2", "8x8x1", "3x5x4"}) {
      SCOPED_TRACE(g);
      const MatmulShape shape{13, 17, 6};
      const bool root = comm.rank() == 0;
      const arma::mat a = integer_matrix<double>(shape.m, shape.k, 3);
      const arma::mat b = integer_matrix<double>(shape.k, shape.n, 4);
      const arma::mat c = matmul(strategy("grid"), comm, shape, root ? a : arma::mat{},
                                 root ? b : arma::mat{}, 0, {{"grid", g}, {"panel", "2"}});
      if (root) {
        EXPECT_TRUE(arma::approx_equal(c, arma::mat(a * b), "absdiff", 0.0));
      }
      distributed_exact<double>(comm, strategy("grid"), {{"grid", g}, {"panel", "2"}}, shape, 3);
    }
  });
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

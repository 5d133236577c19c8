// DP and FSDP on the MPI backend; CTest runs it under mpirun at 1..4 ranks.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "strategy/grid_cases.hpp"
#include "strategy/layout_cases.hpp"
#include "strategy/strategy_cases.hpp"
#include "support/mpi_world.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<StrategyCase, const Strategy*>;

class MpiStrategy : public MpiTestWithParam<Param> {};

TEST_P(MpiStrategy, MatchesSingleProcess) {
  const auto& [c, strategy] = GetParam();
  c.run(mpi_world(), *strategy);
}

class MpiHsdp : public MpiTest {};

TEST_F(MpiHsdp, EveryMesh) {
  hsdp_every_mesh(mpi_world());
}

class MpiGrid : public MpiTest {};

TEST_F(MpiGrid, EveryGrid) {
  grid_every_grid(mpi_world());
}

class MpiLayout : public MpiTest {};

TEST_F(MpiLayout, Distributed) {
  EXPECT_EQ(distributed_layout_every_strategy(mpi_world()),
            static_cast<int>(all_strategies().size()));  // every one
}

INSTANTIATE_TEST_SUITE_P(Cases, MpiStrategy,
                         ::testing::Combine(::testing::ValuesIn(strategy_cases().begin(),
                                                                strategy_cases().end()),
                                            ::testing::ValuesIn(strategy_pointers())),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  test_name(*std::get<1>(p.param));
                         });

}  // namespace
}  // namespace distmm::testing

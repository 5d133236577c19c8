// Distributed SGD on the simulator at 1..9 ranks.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "distmm/simulator.hpp"
#include "strategy/train_cases.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<TrainCase, int>;
class SimTrain : public ::testing::TestWithParam<Param> {};

TEST_P(SimTrain, AgreesWithSingleProcess) {
  const auto& [c, ranks] = GetParam();
  run_simulated(ranks, c.run);
}

INSTANTIATE_TEST_SUITE_P(Cases, SimTrain,
                         ::testing::Combine(::testing::ValuesIn(train_cases().begin(),
                                                                train_cases().end()),
                                            ::testing::Values(1, 2, 3, 4, 6, 9)),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  std::to_string(std::get<1>(p.param)) + "ranks";
                         });

}  // namespace
}  // namespace distmm::testing

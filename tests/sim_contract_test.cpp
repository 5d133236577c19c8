// The Communicator contract on the simulator backend, at world sizes 1..8 and 64.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "contract/contract_cases.hpp"
#include "distmm/simulator.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<ContractCase, int>;

class SimContract : public ::testing::TestWithParam<Param> {};

TEST_P(SimContract, HoldsOnEveryRank) {
  const auto& [c, ranks] = GetParam();
  run_simulated(ranks, c.run);
}

TEST_P(SimContract, HoldsOnSubcommunicators) {
  const auto& [c, ranks] = GetParam();
  run_simulated(ranks, [&](Communicator& comm) { run_on_subcommunicators(comm, c); });
}

INSTANTIATE_TEST_SUITE_P(Cases, SimContract,
                         ::testing::Combine(::testing::ValuesIn(contract_cases().begin(),
                                                                contract_cases().end()),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 64)),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  std::to_string(std::get<1>(p.param)) + "ranks";
                         });

}  // namespace
}  // namespace distmm::testing

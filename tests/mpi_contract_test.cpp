// The Communicator contract on the MPI backend; CTest runs it under mpirun at 1..4 ranks.
#include <gtest/gtest.h>

#include <string>

#include "contract/contract_cases.hpp"
#include "support/mpi_world.hpp"

namespace distmm::testing {
namespace {

class MpiContract : public MpiTestWithParam<ContractCase> {};

TEST_P(MpiContract, HoldsOnEveryRank) {
  GetParam().run(mpi_world());
}

TEST_P(MpiContract, HoldsOnSubcommunicators) {
  run_on_subcommunicators(mpi_world(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, MpiContract,
                         ::testing::ValuesIn(contract_cases().begin(), contract_cases().end()),
                         [](const ::testing::TestParamInfo<ContractCase>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace distmm::testing

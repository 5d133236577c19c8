// Distributed SGD on the MPI backend; CTest runs it under mpirun at 1..4 ranks.
#include <gtest/gtest.h>

#include <string>

#include "strategy/train_cases.hpp"
#include "support/mpi_world.hpp"

namespace distmm::testing {
namespace {

class MpiTrain : public MpiTestWithParam<TrainCase> {};

TEST_P(MpiTrain, AgreesWithSingleProcess) {
  GetParam().run(mpi_world());
}

INSTANTIATE_TEST_SUITE_P(Cases, MpiTrain,
                         ::testing::ValuesIn(train_cases().begin(), train_cases().end()),
                         [](const ::testing::TestParamInfo<TrainCase>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace distmm::testing

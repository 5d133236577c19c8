// Sharded checkpoints on the MPI backend; CTest runs it under mpirun at 1..4 ranks. (Saving
// with one rank count and resuming with another: tests/checkpoint_test.py runs the program.)
#include <gtest/gtest.h>

#include <string>

#include "strategy/checkpoint_cases.hpp"
#include "support/mpi_world.hpp"

namespace distmm::testing {
namespace {

class MpiCheckpoint : public MpiTestWithParam<CheckpointCase> {};

TEST_P(MpiCheckpoint, Case) {
  GetParam().run(mpi_world());
}

INSTANTIATE_TEST_SUITE_P(Cases, MpiCheckpoint,
                         ::testing::ValuesIn(checkpoint_cases().begin(), checkpoint_cases().end()),
                         [](const ::testing::TestParamInfo<CheckpointCase>& p) {
                           return std::string(p.param.name);
                         });

}  // namespace
}  // namespace distmm::testing

#pragma once
// For GoogleTest suites run under mpirun with the shared main (mpi_gtest_main.cpp).
#include <gtest/gtest.h>

#include "distmm/communicator.hpp"
#include "distmm/mpi_session.hpp"

namespace distmm::testing {

// The MPI world communicator of this test process, and the session that made it.
Communicator& mpi_world();
MpiSession& mpi_session();

// Base of every MPI test: after the test body, the ranks combine their results, so a failed
// assertion on any rank fails the test on rank 0 too (which alone prints gtest's report).
class MpiTest : public ::testing::Test {
 protected:
  void TearDown() override;
};

template <typename P>
class MpiTestWithParam : public MpiTest, public ::testing::WithParamInterface<P> {};

}  // namespace distmm::testing

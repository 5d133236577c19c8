#pragma once
// For GoogleTest suites run under mpirun with the shared main (mpi_gtest_main.cpp).
#include "distmm/communicator.hpp"

namespace distmm::testing {

// The MPI world communicator of this test process.
Communicator& mpi_world();

}  // namespace distmm::testing

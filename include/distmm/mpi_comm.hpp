#pragma once
// A Communicator over an MPI communicator that the caller's program already has (mpi4py's
// MPI.COMM_WORLD, or one it split), for programs that initialize MPI themselves instead of
// through MpiSession (the Python module). Includes mpi.h; nothing else public does.
#include <mpi.h>

#include <memory>

#include "distmm/communicator.hpp"
#include "distmm/mpi_session.hpp"

namespace distmm {

// Over duplicates of `comm` (the caller's own messages never meet distmm's), whose errors
// become exceptions. MPI must be initialized (MPI_THREAD_FUNNELED at least) and must outlive
// the result. Collective over `comm`.
std::unique_ptr<Communicator> mpi_communicator(MPI_Comm comm, const MpiOptions& options = {});

}  // namespace distmm

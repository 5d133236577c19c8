#pragma once
// The MPI backend. MpiSession owns the MPI environment (one per process, created by main);
// its world() communicator maps every collective onto MPI's own. Only this backend's source
// includes Boost.MPI or mpi.h.
#include <cstddef>
#include <memory>
#include <vector>

#include "distmm/communicator.hpp"

namespace distmm {

struct MpiOptions {
  // A rank that waits longer than this inside one communication call throws a TimeoutError
  // saying what it waits on (0: wait for ever, as MPI does). MPI cannot see other ranks'
  // state, so a bound is the only way out of a hang.
  double timeout_s = 0;
  // MPI counts are int: any message or collective part larger than this many elements is
  // split into pieces of at most this size. Lowered by tests to exercise the splitting.
  std::size_t chunk_limit = 2147483647;
  // A rank that fails tells the others (Communicator::abandon), whose waits then end with
  // PeerFailure instead of hanging: for callers that go on after an error (the Python
  // module). Every wait then polls instead of blocking in MPI; the program aborts the job
  // instead.
  bool hear_failures = false;
};

class MpiSession {
 public:
  // Initializes MPI (MPI_Init_thread, funneled). Under mpirun this joins the job; started
  // alone it is a world of one rank. Calls retain_freed_memory() (memory.hpp) first.
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // True when this process was started by an MPI launcher (mpirun / mpiexec), decided from
  // the launcher's environment without initializing MPI.
  static bool launched_by_mpirun();

  // A communicator over all processes of the job (a duplicate of MPI_COMM_WORLD whose errors
  // are reported as exceptions). The session must outlive it.
  std::unique_ptr<Communicator> world(const MpiOptions& options = {}) const;

  // The CPU masks of every rank on this process's host (MPI_COMM_TYPE_SHARED), in host-local
  // rank order, and this rank's place among them; masks.size() is the ranks on the host.
  struct HostMasks {
    int local_rank = 0;
    std::vector<std::vector<int>> masks;
  };
  HostMasks host_masks(const std::vector<int>& mine) const;

  // This process's rank in MPI_COMM_WORLD and the job's size.
  int world_rank() const;
  int world_size() const;

  // The largest of every rank's `code` (MPI_Allreduce over MPI_COMM_WORLD): how ranks agree
  // on an exit code, so that all of them leave together with the same one.
  int agree_max(int code) const;

  // Ends every process of the job with `code` (MPI_Abort).
  [[noreturn]] void abort(int code) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distmm

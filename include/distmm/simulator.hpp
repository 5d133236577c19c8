#pragma once
// The in-process backend: N ranks as N threads of this process, exchanging messages through
// shared memory with MPI's semantics.
//
// - Point-to-point sends are synchronous (rendezvous, like MPI_Ssend): the receiver copies the
//   payload straight from the sender's buffer, so a payload is copied exactly once. A program
//   that only works because MPI buffered a small message is reported as a deadlock here.
// - Collectives are matched by call number on each rank; ranks that disagree about the
//   operation, root, element type or counts get a MismatchError naming both sides.
// - When every rank that has not returned is blocked and none can progress, the run ends at
//   once with a DeadlockError describing what each rank waits for.
// - An exception on any rank releases every blocked rank with a PeerFailure.
#include <functional>

#include "distmm/communicator.hpp"

namespace distmm {

// Runs fn(comm) on `ranks` threads (ranks >= 1), each with its own simulator communicator,
// and returns when all have returned. If any rank threw, rethrows the first failure (the
// root cause, not the PeerFailures it caused on other ranks).
void run_simulated(int ranks, const std::function<void(Communicator&)>& fn);

}  // namespace distmm

#pragma once
// distmm calibrate: measures the machine model (model.hpp) on the machine it runs on.
#include <iosfwd>

#include "cli/options.hpp"
#include "distmm/communicator.hpp"

namespace distmm::cli {

// Collective over `comm`: ping-pong sweeps (on one host, and across hosts when the ranks span
// several), a gemm sweep, first-touch, copy and reduction rates; rank 0 writes the model to
// --out (or stdout) and a progress line per phase to `err`. Returns the exit code on every
// rank.
int run_calibrate_job(Communicator& comm, const Options& options, std::ostream& out,
                      std::ostream& err);

}  // namespace distmm::cli

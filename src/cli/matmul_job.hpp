#pragma once
#include <iosfwd>

#include "cli/options.hpp"
#include "distmm/communicator.hpp"

namespace distmm::cli {

// The matmul program on one rank: rank 0 loads or generates A and B, every selected strategy
// runs and is verified, rank 0 prints the table to `out` and writes --out, --report and
// --trace. Returns the exit code, the same on every rank. Bad input is reported by rank 0 on
// `err` and returns kBadInput on every rank; failures during the run are thrown.
int run_matmul_job(Communicator& comm, const Options& options, std::ostream& out,
                   std::ostream& err);

// --dry-run: no communicator and no data; prints (and reports) what each of `ranks` ranks
// would send, receive and hold, from the same sharding code the strategies use.
int run_dry_job(const Options& options, int ranks, std::ostream& out, std::ostream& err);

}  // namespace distmm::cli

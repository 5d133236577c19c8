#pragma once
#include <iosfwd>

#include "cli/options.hpp"
#include "distmm/communicator.hpp"

namespace distmm::cli {

// distmm train on one rank: rank 0 loads or makes X, T and W, each strategy trains, rank 0
// checks W against single-process SGD, prints the losses and a table, and writes --out (W),
// --report and --trace. Returns the exit code, the same on every rank.
int run_train_job(Communicator& comm, const Options& options, std::ostream& out, std::ostream& err);

// distmm train --dry-run: moves no data. Prints, per strategy and rank, what a training step
// sends, receives and holds, and what each checkpoint save writes and a resume reads, for
// `ranks` ranks (and writes them to --report). Returns the exit code.
int run_train_dry_job(const Options& options, int ranks, std::ostream& out, std::ostream& err);

}  // namespace distmm::cli

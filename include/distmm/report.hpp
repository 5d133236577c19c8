#pragma once
// Per-rank figures of one strategy run: planned by its dry run, or measured by the
// communicator's counters and gathered to one rank.
#include <cstdint>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/dry_run.hpp"
#include "distmm/shape.hpp"
#include "distmm/stats.hpp"
#include "distmm/strategy.hpp"

namespace distmm {

struct RankFigures {
  int rank = 0;
  std::uint64_t a_rows = 0;          // rows of A this rank multiplies
  std::uint64_t param_elements = 0;  // parameter elements held persistently
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::uint64_t messages_sent = 0, messages_received = 0;
  std::uint64_t persistent_param_bytes = 0, peak_param_bytes = 0;
  double comm_s = 0, compute_s = 0;  // measured runs only
  bool operator==(const RankFigures&) const = default;
};

// What rank `rank` of a dry run (dry_run.hpp) sends, receives and holds over the plan's setup
// and one execution. Needs no data, so it works for shapes far larger than memory.
RankFigures planned(const DryRun& run, int rank, std::size_t element_bytes);

// This rank's measured figures, from its stats: its counters, its parameter memory, the rows
// of A its first multiply took.
RankFigures measured(const Communicator& comm, std::size_t element_bytes);

// Gathers a fixed-length row of values from every rank to `root` (rows in rank order there;
// empty elsewhere).
std::vector<std::vector<double>> gather_values(Communicator& comm, const std::vector<double>& mine,
                                               int root);

// Where a rank ran: its host, the CPUs it may run on and its BLAS threads per call.
struct RankPlacement {
  std::string host;
  std::string cpus;  // "0-1", as Linux writes CPU lists
  int blas_threads = 1;
};
// This rank's placement, read now (host(), its affinity mask, the BLAS thread count).
RankPlacement this_rank_placement(const Communicator& comm);

// Every rank's placement on `root` (in rank order there; empty elsewhere).
std::vector<RankPlacement> gather_placement(Communicator& comm, int root);

// "rank 0-1 on a, rank 2-3 on b; BLAS threads (CPUs): rank 0-1: 1 (0-1), ...": where the
// ranks ran and how many BLAS threads each multiplied with.
std::string placement(const std::vector<RankPlacement>& ranks);

// Gathers every rank's figures to `root` (in rank order there; empty elsewhere).
std::vector<RankFigures> gather_figures(Communicator& comm, const RankFigures& mine, int root);

// Gathers every rank's trace events to `root` (indexed by rank there; empty elsewhere).
// `mine` is a copy: the gather's own calls are recorded in the rank's events as it runs.
std::vector<std::vector<TraceEvent>> gather_events(Communicator& comm, std::vector<TraceEvent> mine,
                                                   int root);

// Gathers every rank's communicator names (its stats().communicators(), which events'
// `comm` index) to `root` (indexed by rank there; empty elsewhere).
std::vector<std::vector<std::string>> gather_communicators(Communicator& comm, int root);

}  // namespace distmm

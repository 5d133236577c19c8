#pragma once
// What the program reports about each strategy run: the table, --report and --trace.
#include <optional>
#include <string>
#include <vector>

#include "distmm/report.hpp"

namespace distmm::cli {

struct RunRecord {
  Strategy strategy = Strategy::dp;
  std::string backend;
  int ranks = 1;
  MatmulShape shape;
  bool dry_run = false;
  double seconds = 0;                   // measured runs only
  std::optional<double> max_abs_error;  // when verified
  std::vector<RankFigures> per_rank;
  std::vector<std::string> hosts;               // by rank
  std::vector<std::vector<TraceEvent>> events;  // by rank, when tracing
};

// The table printed after the runs (dry runs: what each rank would move and hold).
std::string table(const std::vector<RunRecord>& runs);

// --report: {"runs": [...]}, the schema documented in the README.
std::string report_json(const std::vector<RunRecord>& runs);

// --trace: Chrome's Trace Event format, one process per rank, runs one after another.
std::string trace_json(const std::vector<RunRecord>& runs);

}  // namespace distmm::cli

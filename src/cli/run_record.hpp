#pragma once
// What the program reports about each strategy run: the table, --report and --trace.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distmm/model.hpp"
#include "distmm/report.hpp"

namespace distmm::cli {

// What one rank measured of a run beyond the counters: time and memory it touched.
struct RankRuntime {
  double setup_s = 0;                   // setting up the plan (placing B)
  std::uint64_t setup_page_faults = 0;  // minor page faults during setup
  std::uint64_t first_page_faults = 0;  // ... during the first execution (warm-up or timed)
  std::uint64_t page_faults = 0;        // ... during the timed executions, all of them
  std::uint64_t allocated_bytes = 0;    // bytes the plan allocated at setup
};

struct RunRecord {
  const Strategy* strategy = nullptr;
  StrategySettings settings;  // its own options, settled for the run (none for most)
  std::string backend;
  int ranks = 1;
  MatmulShape shape;
  bool dry_run = false;
  bool distributed = false;  // --layout distributed (layout.hpp)
  DataType dtype = DataType::f64;
  double seconds = 0;                   // measured runs only: median of times_s
  std::vector<double> times_s;          // each timed execution, rank 0's clock
  double setup_s = 0;                   // rank 0's plan setup
  std::size_t warmup = 0;               // untimed executions before times_s
  std::optional<double> max_abs_error;  // when verified: the largest over every execution
  std::vector<RankFigures> per_rank;
  std::vector<RankRuntime> runtime;             // by rank, measured runs only
  std::vector<RankPlacement> placement;         // by rank
  std::vector<std::vector<TraceEvent>> events;  // by rank, when tracing
  // By rank, the communicators its events' `comm` indexes (gather_communicators).
  std::vector<std::vector<std::string>> communicators;
  // By rank, the events of setup and the first execution (what per_rank counts), for the
  // report's per-communicator breakdown; when reporting.
  std::vector<std::vector<TraceEvent>> first_events;
  // With --model: the time model's prediction of this run, and of time_s as it was run (the
  // median of the timed executions' predictions: the first cold when there was no warm-up).
  std::optional<PredictedRun> predicted;
  double predicted_time_s = 0;
  Interval predicted_interval;  // predicted_time_s's
  std::string model_name;
  std::string model_where;  // a dry run's: the placement the prediction assumed (describe())
  // --strategy auto: what it picked over what (auto_note(), auto_json()); empty, null otherwise.
  std::string auto_note;
  nlohmann::json auto_pick;
};

// "f32" or "f64", as --dtype spells it.
const char* dtype_name(DataType t);

// Every rank's runtime figures on `root` (in rank order there; empty elsewhere).
std::vector<RankRuntime> gather_runtime(Communicator& comm, const RankRuntime& mine, int root);

// The table printed after the runs (dry runs: what each rank would move and hold).
std::string table(const std::vector<RunRecord>& runs);

// A run's strategy settings as report fields: each option by name, a number where it is one.
void put_settings(nlohmann::json& run, const StrategySettings& settings);

// A run's --model figures in its report entry: predicted_time_s (what time_s is predicted to
// be) with its interval `time`, and the cold and warm executions' (or steps').
void put_prediction(nlohmann::json& run, const PredictedRun& p, double time_s,
                    const Interval& time);

// --report: {"runs": [...]}, the schema documented in the README.
std::string report_json(const std::vector<RunRecord>& runs);

// --trace: Chrome's Trace Event format, one process per rank, runs one after another.
std::string trace_json(const std::vector<RunRecord>& runs);

}  // namespace distmm::cli

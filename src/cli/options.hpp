#pragma once
// The distmm program's command line.
#include <optional>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/fault.hpp"
#include "distmm/model.hpp"
#include "distmm/shape.hpp"
#include "distmm/strategy.hpp"

namespace distmm::cli {

// Exit codes, as documented in --help and the README.
enum ExitCode : int {
  kSuccess = 0,
  kVerificationFailed = 1,
  kBadInput = 2,
  kRunFailed = 3,
};

struct TrainOptions {
  std::size_t steps = 20;
  double lr = 0.1;
  std::size_t print_every = 1;
  double noise = 0.01;  // standard deviation of the synthetic targets' noise
  bool adam = false;    // --optimizer adam (else SGD)
  std::string x_file, t_file, w_file;
  std::string checkpoint_dir;        // save sharded checkpoints here (--checkpoint-dir)
  std::size_t checkpoint_every = 0;  // every K steps (0: at the end only)
  std::size_t keep = 2;              // committed checkpoints kept
  std::string resume;                // DIR or DIR/step-N
};

struct Options {
  enum class Mode { matmul, train, calibrate };
  Mode mode = Mode::matmul;
  TrainOptions train;
  std::vector<const Strategy*> strategies;  // in the order to run (auto: its candidates)
  bool auto_strategy = false;         // --strategy auto: --model picks one of `strategies` to run
  std::optional<int> ranks;           // simulator with this many ranks
  StrategySettings strategy_options;  // the strategies' own options, as given (--replicas)
  MatmulShape shape{1024, 1024, 1024};
  unsigned long long seed = 42;
  std::string a_file, b_file, out_file;
  std::string report_file, trace_file;
  std::string draw_file;  // --draw FILE.svg: the strategy's sharding (draw.hpp)
  bool verify = true;
  bool dry_run = false;
  bool distributed = false;        // --layout distributed (layout.hpp)
  DataType dtype = DataType::f64;  // element type of the whole run (--dtype)
  std::size_t warmup = 0;          // untimed executions of each plan before the timed ones
  std::size_t repeat = 1;          // timed executions of each plan
  double timeout_s = 0;            // MPI backend: bound on one communication call's wait
  FaultPlan fault;
  // The time model (--model FILE, loaded and validated when parsing), and how ranks fill
  // hosts in a dry run's prediction (--ranks-per-host).
  std::string model_file;
  std::optional<MachineModel> model;
  std::optional<int> ranks_per_host;
  bool calibrate_quick = false;  // distmm calibrate --quick
};

// Parses argv. Either options to run, or an exit code with what to print (help or version on
// stdout with code 0; a one-line error on stderr with kBadInput).
struct ParseResult {
  std::optional<Options> options;
  int exit_code = kSuccess;
  std::string message;
};
ParseResult parse_options(int argc, const char* const* argv);

}  // namespace distmm::cli

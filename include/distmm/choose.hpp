#pragma once
// --strategy auto: the time model (model.hpp) picks the strategy it predicts fastest for a run,
// among those whose plans fit in the memory a rank may hold. Every candidate is predicted as
// the run's only strategy, timed as the run will be timed.
#include <cstdint>
#include <vector>

#include "distmm/model.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"

namespace distmm {

struct StrategyCandidate {
  const Strategy* strategy = nullptr;
  StrategySettings settings;  // settled for the run (Strategy::settle)
};

// How the run is timed: a multiply's time_s (the median of `repeat` executions after `warmup`,
// the first cold when there is no warm-up), or a training run's `steps` steps (the first
// cold), whose memory follows its optimizer.
struct TimedRun {
  bool train = false;
  std::size_t warmup = 0, repeat = 1;
  std::size_t steps = 1;
  Optimizer optimizer = Optimizer::sgd;
  bool distributed = false;  // --layout distributed (a multiply's)
  DataType type = DataType::f64;
};

struct RankedStrategy {
  const Strategy* strategy = nullptr;
  StrategySettings settings;
  PredictedRun predicted;
  double time_s = 0;                 // the run, timed as TimedRun says
  Interval interval;                 // time_s's nominal 80 % interval
  std::uint64_t bytes_per_rank = 0;  // the most any rank's plan (training step) allocates
  bool fits = true;                  // within the memory a rank may hold
};

// Each candidate predicted on `model` for ranks placed as `where`, fastest first; those that fit
// in `memory_per_rank` bytes (0: no limit) before those that do not. Throws InputError when the
// model cannot cost one.
std::vector<RankedStrategy> rank_strategies(const MachineModel& model, const ModelPlacement& where,
                                            const std::vector<StrategyCandidate>& candidates,
                                            const MatmulShape& shape, const TimedRun& run,
                                            double memory_per_rank);

// The median of the timed executions' predicted times: `repeat` of them after `warmup`, the
// first cold when warmup is 0.
double predicted_median(const PredictedRun& p, std::size_t warmup, std::size_t repeat);
// Its nominal 80 % interval, the ends taken the same way (each execution's interval).
Interval predicted_interval(const PredictedRun& p, std::size_t warmup, std::size_t repeat);

}  // namespace distmm

// --strategy auto (choose.hpp): every candidate run dry, predicted, and ranked.
#include "distmm/choose.hpp"

#include <algorithm>
#include <functional>
#include <future>

#include "distmm/dry_run.hpp"

namespace distmm {

namespace {

// The median of the timed executions' figures: the first is the cold one's where there was no
// warm-up, the rest warm ones'.
double median_of_executions(double cold, double warm, std::size_t warmup, std::size_t repeat) {
  std::vector<double> times;
  for (std::size_t i = 0; i < repeat; ++i) times.push_back(warmup == 0 && i == 0 ? cold : warm);
  if (times.empty()) return warm;
  std::sort(times.begin(), times.end());
  const std::size_t n = times.size();
  return n % 2 == 1 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

}  // namespace

double predicted_median(const PredictedRun& p, std::size_t warmup, std::size_t repeat) {
  return median_of_executions(p.cold_s, p.warm_s, warmup, repeat);
}

Interval predicted_interval(const PredictedRun& p, std::size_t warmup, std::size_t repeat) {
  return {median_of_executions(p.cold_interval.low_s, p.warm_interval.low_s, warmup, repeat),
          median_of_executions(p.cold_interval.high_s, p.warm_interval.high_s, warmup, repeat)};
}

std::vector<RankedStrategy> rank_strategies(const MachineModel& model, const ModelPlacement& where,
                                            const std::vector<StrategyCandidate>& candidates,
                                            const MatmulShape& shape, const TimedRun& run,
                                            double memory_per_rank) {
  // Each candidate's dry run and prediction are independent: they run side by side (a 1e6^3
  // dry run on 4096 ranks spends seconds replaying fsdp-overlap's ring and grid's panels).
  const auto rank_one = [&](const StrategyCandidate& c) {
    // One dry run serves both the memory and the prediction (a cold execution and a warm one;
    // training: three steps), as the program's --dry-run --model does.
    DryRun dry;
    if (run.train) {
      TrainConfig config;
      config.settings = c.settings;
      config.optimizer = run.optimizer;
      dry = dry_train(*c.strategy, shape, where.ranks, run.type, config, 3);
    } else {
      dry = dry_run(*c.strategy, shape, where.ranks, run.type, c.settings, 2, run.distributed);
    }
    RankedStrategy r{c.strategy, c.settings, {}, 0, {}, 0, true};
    r.predicted = predict_time(model, where, dry, shape, size_of(run.type), run.train, {});
    const double later = static_cast<double>(run.steps > 0 ? run.steps - 1 : 0);
    r.time_s = run.train ? r.predicted.cold_s + later * r.predicted.warm_s
                         : predicted_median(r.predicted, run.warmup, run.repeat);
    // The steps' intervals add up as their times do (their errors go together: one model).
    const Interval& cold = r.predicted.cold_interval;
    const Interval& warm = r.predicted.warm_interval;
    r.interval = run.train
                     ? Interval{cold.low_s + later * warm.low_s, cold.high_s + later * warm.high_s}
                     : predicted_interval(r.predicted, run.warmup, run.repeat);
    for (const DryRank& rank : dry.ranks) {
      r.bytes_per_rank = std::max(r.bytes_per_rank, rank.allocated_bytes);
    }
    r.fits = memory_per_rank <= 0 || static_cast<double>(r.bytes_per_rank) <= memory_per_rank;
    return r;
  };
  std::vector<std::future<RankedStrategy>> pending;
  for (const StrategyCandidate& c : candidates) {
    pending.push_back(std::async(std::launch::async, rank_one, std::cref(c)));
  }
  std::vector<RankedStrategy> ranked;
  for (auto& p : pending) ranked.push_back(p.get());  // rethrows a candidate's InputError
  // Stable: among equal times the registry's order decides.
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const RankedStrategy& a, const RankedStrategy& b) {
                     if (a.fits != b.fits) return a.fits;
                     return a.time_s < b.time_s;
                   });
  return ranked;
}

}  // namespace distmm

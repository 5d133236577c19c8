// A strategy's events for the time model (model.hpp): its dry run, replayed by replay.cpp.
#include <cmath>
#include <sstream>
#include <string>

#include "distmm/dry_run.hpp"
#include "distmm/model.hpp"

namespace distmm {

std::string group_name(const PlannedRun& run, int group) {
  if (group == 0) return "world";
  std::ostringstream out;
  out << "ranks ";
  const auto& members = run.groups[static_cast<std::size_t>(group)];
  for (std::size_t i = 0; i < members.size(); ++i) out << (i ? "," : "") << members[i];
  out << " of world";
  return out.str();
}

Interval interval_of(const Uncertainty& u, double predicted_s, bool cold) {
  const LogInterval& w = cold ? u.cold : u.warm;
  return {predicted_s * std::exp(w.low), predicted_s * std::exp(w.high)};
}

namespace {

// The strategy's dry run: `executions` executions of its plan, or training steps.
DryRun dry_events(const Strategy& strategy, const MatmulShape& shape, int ranks,
                  std::size_t element_bytes, const StrategySettings& settings,
                  std::size_t executions, bool train) {
  const DataType type = element_bytes == 8 ? DataType::f64 : DataType::f32;
  if (!train) return dry_run(strategy, shape, ranks, type, settings, executions);
  TrainConfig config;
  config.settings = settings;
  return dry_train(strategy, shape, ranks, type, config, executions);
}

}  // namespace

PlannedRun planned_events(const Strategy& strategy, const MatmulShape& shape, int ranks,
                          std::size_t element_bytes, const StrategySettings& settings,
                          std::size_t executions, bool train) {
  const DryRun dry = dry_events(strategy, shape, ranks, element_bytes, settings, executions, train);
  PlannedRun run;
  run.groups = dry.groups;
  for (const DryRank& rank : dry.ranks) run.ranks.push_back(rank.events.expand());
  return run;
}

PredictedRun predict_time(const MachineModel& model, const ModelPlacement& pl,
                          const Strategy& strategy, const MatmulShape& shape,
                          std::size_t element_bytes, const StrategySettings& settings, bool train,
                          const FreshMemory& fresh) {
  // Executions (or steps) replayed: the first is cold, the last warm.
  const DryRun run =
      dry_events(strategy, shape, pl.ranks, element_bytes, settings, train ? 3 : 2, train);
  return predict_time(model, pl, run, shape, element_bytes, train, fresh);
}

}  // namespace distmm

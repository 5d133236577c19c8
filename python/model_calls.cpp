// The module's calls on the time model (model_calls.hpp).
#include "model_calls.hpp"

#include <optional>
#include <string>
#include <vector>

#include "distmm/choose.hpp"
#include "distmm/error.hpp"
#include "distmm/model.hpp"
#include "distmm/strategies/grid.hpp"
#include "distmm/strategy.hpp"
#include "options.hpp"

namespace distmm::python {

py::dict predict(const std::string& name, std::size_t m, std::size_t k, std::size_t n, int ranks,
                 const std::string& model_file, int ranks_per_host, int blas_threads,
                 const std::string& dtype, bool train, const py::dict& options) {
  const Strategy& s = distmm::strategy(name);
  const MachineModel model = load_model(model_file);
  const bool f32 = dtype == "float32" || dtype == "f32";
  const MatmulShape shape{m, k, n};
  RunPlacement where{ranks, 1, shape, f32 ? 4u : 8u, 0};
  where.training = train;
  const StrategySettings settings = s.settle(settings_of(s, options), where);
  ModelPlacement placement;
  placement.ranks = ranks;
  placement.ranks_per_host = ranks_per_host > 0 ? ranks_per_host : ranks;
  placement.blas_threads = blas_threads;
  PredictedRun p;
  {
    py::gil_scoped_release release;
    p = predict_time(model, placement, s, shape, f32 ? 4 : 8, settings, train);
  }
  py::dict d;
  d["strategy"] = name;
  d["label"] = s.label(settings);
  d["setup_s"] = p.setup_s;
  d["cold_s"] = p.cold_s;
  d["warm_s"] = p.warm_s;
  // Nominal 80 % intervals (the model's held-out error).
  d["cold_interval_s"] = py::make_tuple(p.cold_interval.low_s, p.cold_interval.high_s);
  d["warm_interval_s"] = py::make_tuple(p.warm_interval.low_s, p.warm_interval.high_s);
  d["comm_s"] = p.comm_s;
  d["compute_s"] = p.compute_s;
  return d;
}

// --strategy auto (choose.hpp): every strategy of the registry (those that train, or those with
// the distributed layout) settled for the run and ranked by the model; each candidate with the
// options that make it again (its own options' settled values).
py::dict choose(std::size_t m, std::size_t k, std::size_t n, int ranks,
                const std::string& model_file, int ranks_per_host, int blas_threads,
                const std::string& dtype, bool train, const py::object& memory, bool distributed,
                std::size_t warmup, std::size_t repeat, std::size_t steps,
                const py::dict& options) {
  if (ranks < 1) throw InputError("ranks: must be at least 1", -1, "ranks");
  // Bytes, or text as the program's --memory-per-rank takes it ("2GiB").
  const double memory_per_rank = py::isinstance<py::str>(memory)
                                     ? parse_memory_bytes(memory.cast<std::string>())
                                     : memory.cast<double>();
  const MachineModel model = load_model(model_file);
  const bool f32 = dtype == "float32" || dtype == "f32";
  const MatmulShape shape{m, k, n};
  ModelPlacement placement;
  placement.ranks = ranks;
  placement.ranks_per_host = ranks_per_host > 0 ? ranks_per_host : ranks;
  placement.blas_threads = blas_threads;
  RunPlacement where{ranks, (ranks + placement.ranks_per_host - 1) / placement.ranks_per_host,
                     shape, f32 ? 4u : 8u, memory_per_rank};
  where.training = train;
  where.distributed = distributed && !train;
  std::vector<StrategyCandidate> candidates;
  std::optional<InputError> first;
  for (const Strategy& s : train ? training_strategies() : all_strategies()) {
    if (where.distributed && !s.distributed_blocks({1, 1, 1}, 1, 0, {})) continue;
    py::dict own;  // the options given that are this strategy's
    for (const auto& [key, value] : options) {
      std::string name = key.cast<std::string>();
      for (char& c : name) c = c == '_' ? '-' : c;
      for (const StrategyOption& o : s.options()) {
        if (o.name == name) own[key] = value;
      }
    }
    try {
      candidates.push_back({&s, s.settle(settings_of(s, own), where)});
    } catch (const InputError& e) {
      if (!first) first = e;  // grid: no grid fits the memory; another strategy may
    }
  }
  if (candidates.empty() && first) throw *first;
  TimedRun run;
  run.train = train;
  run.warmup = warmup;
  run.repeat = repeat;
  run.steps = steps;
  run.distributed = where.distributed;
  run.type = f32 ? DataType::f32 : DataType::f64;
  std::vector<RankedStrategy> ranked;
  {
    py::gil_scoped_release release;
    ranked = rank_strategies(model, placement, candidates, shape, run, memory_per_rank);
  }
  py::list listed;
  for (const RankedStrategy& r : ranked) {
    py::dict again;  // the strategy's own options, as plan() and train() take them
    for (const StrategyOption& o : r.strategy->options()) {
      const std::string* value = r.settings.find(o.name);
      if (value == nullptr || o.name == "memory-per-rank") continue;
      std::string key = o.name;
      for (char& c : key) c = c == '-' ? '_' : c;
      again[py::str(key)] =
          o.whole_number ? py::object(py::int_(std::stoll(*value))) : py::object(py::str(*value));
    }
    py::dict d;
    d["strategy"] = std::string(r.strategy->name());
    d["label"] = r.strategy->label(r.settings);
    d["options"] = again;
    d["predicted_time_s"] = r.time_s;
    d["interval_s"] = py::make_tuple(r.interval.low_s, r.interval.high_s);
    d["cold_s"] = r.predicted.cold_s;
    d["warm_s"] = r.predicted.warm_s;
    d["bytes_per_rank"] = r.bytes_per_rank;
    d["fits"] = r.fits;
    listed.append(d);
  }
  if (ranked.empty() || !ranked.front().fits) {
    throw InputError("strategy auto: no strategy's plan fits in " +
                         std::to_string(static_cast<long long>(memory_per_rank)) + " bytes a rank",
                     -1, "memory_per_rank");
  }
  py::dict out;
  out["picked"] = listed[0]["label"];
  out["strategy"] = listed[0]["strategy"];
  out["options"] = listed[0]["options"];
  out["candidates"] = listed;
  return out;
}

}  // namespace distmm::python

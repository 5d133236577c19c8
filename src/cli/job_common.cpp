#include "cli/job_common.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "distmm/dry_run.hpp"
#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/memory.hpp"
#include "distmm/strategies/grid.hpp"

namespace distmm::cli {

void check_output_files(const Options& o) {
  if (!o.out_file.empty()) check_output_path(o.out_file, "--out");
  if (!o.report_file.empty()) check_writable(o.report_file, "--report");
  if (!o.trace_file.empty()) check_writable(o.trace_file, "--trace");
  if (!o.draw_file.empty()) check_writable(o.draw_file, "--draw");
}

bool arm_fault(Communicator& comm, const Options& options, std::ostream& err) {
  const FaultPlan& fault = options.fault;
  if ((fault.kind == FaultPlan::Kind::crash || fault.kind == FaultPlan::Kind::skip) &&
      fault.rank >= comm.size()) {
    if (comm.rank() == kRoot) {
      err << "distmm: error: --fault " << fault.spec << ": rank " << fault.rank
          << " does not exist in a run of " << comm.size() << " ranks" << std::endl;
    }
    return false;
  }
  comm.inject(fault);
  return true;
}

std::optional<MatmulShape> share_shape(Communicator& comm, std::ostream& err,
                                       const std::function<MatmulShape()>& load) {
  std::vector<double> header{0, 0, 0, 0};  // status, m, k, n
  if (comm.rank() == kRoot) {
    try {
      const MatmulShape s = load();
      header = {0, static_cast<double>(s.m), static_cast<double>(s.k), static_cast<double>(s.n)};
    } catch (const InputError& e) {
      err << "distmm: error: " << printable(e.what()) << std::endl;
      header[0] = kBadInput;
    }
  }
  comm.broadcast(header, kRoot);
  if (header[0] != 0) return std::nullopt;
  return MatmulShape{static_cast<std::size_t>(header[1]), static_cast<std::size_t>(header[2]),
                     static_cast<std::size_t>(header[3])};
}

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

bool fits_in_memory(Communicator& comm, std::uint64_t need, const std::string& what,
                    const std::string& breakdown, const std::vector<RankPlacement>& placement,
                    std::ostream& err) {
  const auto rows = gather_values(
      comm, {static_cast<double>(need), static_cast<double>(available_memory())}, kRoot);
  std::vector<double> verdict{1};
  if (comm.rank() == kRoot) {
    // Per host: the ranks on it, their needs added up, the least memory any of them saw.
    std::map<std::string, std::vector<std::size_t>> hosts;
    for (std::size_t r = 0; r < placement.size(); ++r) hosts[placement[r].host].push_back(r);
    for (const auto& [host, ranks] : hosts) {
      double needed = 0, available = rows[ranks.front()][1];
      for (std::size_t r : ranks) {
        needed += rows[r][0];
        available = std::min(available, rows[r][1]);
      }
      if (needed <= available) continue;
      err << "distmm: error: the problem does not fit in memory: " << ranks.size()
          << (ranks.size() == 1 ? " rank" : " ranks") << " on " << host << " would hold "
          << gib(needed) << " (rank 0: " << gib(rows[0][0]) << ", " << what << ") but "
          << gib(available) << " is available there (MemAvailable or the cgroup limit); "
          << breakdown << std::endl;
      verdict[0] = 0;
      break;
    }
  }
  comm.broadcast(verdict, kRoot);
  return verdict[0] != 0;
}

int write_outputs(std::ostream& err, const std::function<void()>& write) {
  try {
    write();
  } catch (const InputError& e) {
    err << "distmm: error: " << printable(e.what()) << std::endl;
    return kRunFailed;
  }
  return kSuccess;
}

std::optional<std::vector<RunStrategy>> settle_strategies(const Options& o, RunPlacement where,
                                                          std::ostream& err) {
  std::vector<RunStrategy> out;
  where.element_bytes = size_of(o.dtype);
  where.distributed = o.distributed;
  where.training = o.mode == Options::Mode::train;
  std::optional<InputError> first;
  for (const Strategy* s : o.strategies) {
    try {
      out.push_back({s, s->settle(o.strategy_options, where)});
    } catch (const InputError& e) {
      // auto leaves out a candidate that cannot run here (grid: no grid fits the memory), so
      // long as another can.
      if (!o.auto_strategy) {
        err << "distmm: error: " << printable(e.what()) << std::endl;
        return std::nullopt;
      }
      if (!first) first = e;
    }
  }
  if (out.empty() && first) {
    err << "distmm: error: " << printable(first->what()) << std::endl;
    return std::nullopt;
  }
  return out;
}

int dry_run_hosts(const Options& o, int ranks) {
  return o.ranks_per_host ? (ranks + *o.ranks_per_host - 1) / *o.ranks_per_host : 1;
}

std::optional<std::vector<RunStrategy>> dry_run_strategies(const Options& o, int ranks,
                                                           const MatmulShape& shape,
                                                           std::ostream& err) {
  auto settled = settle_strategies(o, RunPlacement{ranks, dry_run_hosts(o, ranks), shape}, err);
  if (!settled || !o.auto_strategy) return settled;
  auto pick = pick_strategy(o, model_placement(o, ranks, {}), shape, *settled, 0, err);
  if (!pick) return std::nullopt;
  return std::vector<RunStrategy>{std::move(*pick)};
}

std::optional<std::vector<RunStrategy>> agree_strategies(
    Communicator& comm, const Options& o, const std::vector<RankPlacement>& placement,
    const MatmulShape& shape, std::ostream& err) {
  // Each rank's free memory, on rank 0: a rank may hold its host's over the host's ranks.
  std::vector<double> free_here{static_cast<double>(available_memory())};
  std::vector<double> free_all(comm.rank() == kRoot ? static_cast<std::size_t>(comm.size()) : 0);
  comm.gatherv(free_here, free_all,
               std::vector<std::size_t>(static_cast<std::size_t>(comm.size()), 1), kRoot);
  std::vector<double> facts{0, 0};  // hosts, memory per rank
  if (comm.rank() == kRoot) {
    std::map<std::string, std::vector<std::size_t>> hosts;
    for (std::size_t r = 0; r < placement.size(); ++r) hosts[placement[r].host].push_back(r);
    double per_rank = -1;
    for (const auto& [host, ranks] : hosts) {
      double least = free_all[ranks.front()];
      for (std::size_t r : ranks) least = std::min(least, free_all[r]);
      const double share = least / static_cast<double>(ranks.size());
      per_rank = per_rank < 0 ? share : std::min(per_rank, share);
    }
    facts = {static_cast<double>(std::max<std::size_t>(1, hosts.size())), std::max(0.0, per_rank)};
  }
  comm.broadcast(facts, kRoot);
  // Every rank settles the same way; only rank 0 says why it could not.
  std::ostringstream quiet;
  auto settled = settle_strategies(
      o, RunPlacement{comm.size(), static_cast<int>(facts[0]), shape, 8, facts[1]},
      comm.rank() == kRoot ? err : quiet);
  if (!settled || !o.auto_strategy) return settled;
  // auto: rank 0 predicts every candidate and tells the others which it picked (-1: none).
  std::vector<double> picked{-1};
  std::optional<RunStrategy> pick;
  if (comm.rank() == kRoot) {
    pick = pick_strategy(o, model_placement(o, comm.size(), placement), shape, *settled, facts[1],
                         err);
    for (std::size_t i = 0; pick && i < settled->size(); ++i) {
      if ((*settled)[i].strategy == pick->strategy) picked[0] = static_cast<double>(i);
    }
  }
  comm.broadcast(picked, kRoot);
  if (picked[0] < 0) return std::nullopt;
  if (pick) return std::vector<RunStrategy>{std::move(*pick)};
  return std::vector<RunStrategy>{(*settled)[static_cast<std::size_t>(picked[0])]};
}

std::string describe(const ModelPlacement& where) {
  const int hosts = (where.ranks + where.ranks_per_host - 1) / where.ranks_per_host;
  std::ostringstream out;
  out << where.ranks << " rank(s) on " << hosts << " host(s), "
      << std::min(where.ranks, where.ranks_per_host) << " per host, " << where.blas_threads
      << " BLAS thread(s) each";
  return out.str();
}

ModelPlacement model_placement(const Options& o, int ranks,
                               const std::vector<RankPlacement>& placement) {
  ModelPlacement where;
  where.ranks = ranks;
  where.ranks_per_host = o.ranks_per_host.value_or(ranks);
  where.blas_threads = placement.empty() ? 1 : placement.front().blas_threads;
  if (placement.empty() && o.model) {
    // A dry run: each rank multiplies with its share of its host's cores, as distmm sizes a
    // rank's BLAS threads when it runs (one rank per host of 2 cores: 2 threads), on the
    // model's curve for that many threads or, without one, the nearest below it.
    const int on_host = std::min(ranks, where.ranks_per_host);
    const int share = std::max(1, o.model->cores_per_host / std::max(1, on_host));
    int best = 0;
    for (const GemmModel& g : o.model->gemm) {
      if (g.threads <= share && g.threads > best) best = g.threads;
    }
    if (best > 0) where.blas_threads = best;
  }
  if (!placement.empty()) {
    std::map<std::string, int> per_host;
    int most = 1;
    for (const RankPlacement& p : placement) most = std::max(most, ++per_host[p.host]);
    where.ranks_per_host = most;
  }
  return where;
}

std::vector<PredictedRun> predict_runs(const Options& o, const ModelPlacement& where,
                                       const MatmulShape& shape,
                                       const std::vector<RunStrategy>& strategies, bool train) {
  std::vector<PredictedRun> out;
  if (!o.model) return out;
  // The program runs its strategies one after another on the same A and C: only the first
  // finds them new. A plan's own buffers count as new for every plan: measured cold
  // executions pay their first use even where the memory was recycled from a plan before
  // (bench/validate_model.sh; counting only memory beyond the largest plan before predicted
  // the cold executions 20-45 % low).
  for (const RunStrategy& s : strategies) {
    if (!s.ranking.empty()) {  // auto predicted it already, as the run's only strategy
      out.push_back(s.ranking.front().predicted);
      continue;
    }
    FreshMemory fresh;
    fresh.caller = out.empty();
    if (o.distributed && !train) {
      // The layout's plans, run dry from each rank's own blocks as --dry-run runs them.
      const DryRun dry = dry_run(*s.strategy, shape, where.ranks, o.dtype, s.settings, 2, true);
      out.push_back(predict_time(*o.model, where, dry, shape, size_of(o.dtype), false, fresh));
      continue;
    }
    out.push_back(predict_time(*o.model, where, *s.strategy, shape, size_of(o.dtype), s.settings,
                               train, fresh));
  }
  return out;
}

std::optional<RunStrategy> pick_strategy(const Options& o, const ModelPlacement& where,
                                         const MatmulShape& shape,
                                         const std::vector<RunStrategy>& candidates,
                                         double host_share, std::ostream& err) {
  std::vector<StrategyCandidate> each;
  for (const RunStrategy& c : candidates) each.push_back({c.strategy, c.settings});
  TimedRun run;
  run.train = o.mode == Options::Mode::train;
  run.warmup = o.warmup;
  run.repeat = o.repeat;
  run.steps = o.train.steps;
  run.optimizer = o.train.adam ? Optimizer::adam : Optimizer::sgd;
  run.distributed = o.distributed && !run.train;
  run.type = o.dtype;
  std::vector<RankedStrategy> ranked;
  double memory_per_rank = host_share;
  try {
    const std::string* given = o.strategy_options.find("memory-per-rank");
    if (given) memory_per_rank = parse_memory_bytes(*given);
    ranked = rank_strategies(*o.model, where, each, shape, run, memory_per_rank);
  } catch (const InputError& e) {
    err << "distmm: error: " << printable(e.what()) << std::endl;
    return std::nullopt;
  }
  if (ranked.empty()) {
    err << "distmm: error: --strategy auto: no strategy to choose from" << std::endl;
    return std::nullopt;
  }
  if (!ranked.front().fits) {
    const auto least = std::min_element(ranked.begin(), ranked.end(),
                                        [](const RankedStrategy& a, const RankedStrategy& b) {
                                          return a.bytes_per_rank < b.bytes_per_rank;
                                        });
    err << "distmm: error: --strategy auto: no strategy's plan fits in "
        << static_cast<long long>(memory_per_rank) << " bytes a rank (the least, "
        << least->strategy->label(least->settings) << ", allocates " << least->bytes_per_rank
        << " bytes on its fullest rank)" << std::endl;
    return std::nullopt;
  }
  RunStrategy picked{ranked.front().strategy, ranked.front().settings, std::move(ranked)};
  return picked;
}

std::string auto_note(const Options& o, const RunStrategy& s) {
  if (s.ranking.empty()) return {};
  const RankedStrategy& best = s.ranking.front();
  char line[512];
  std::snprintf(line, sizeof line, "auto: picked %s, predicted %.6f s (80 %%: %.6f-%.6f)%s",
                best.strategy->label(best.settings).c_str(), best.time_s, best.interval.low_s,
                best.interval.high_s,
                o.mode == Options::Mode::train
                    ? (" for " + std::to_string(o.train.steps) + " steps").c_str()
                    : "");
  std::string note = line;
  std::size_t fitting = 0;
  for (const RankedStrategy& r : s.ranking) fitting += r.fits ? 1 : 0;
  if (fitting > 1) {
    const RankedStrategy& next = s.ranking[1];
    std::snprintf(line, sizeof line, "; runner-up %s, %.6f s (%+.1f %%)",
                  next.strategy->label(next.settings).c_str(), next.time_s,
                  best.time_s > 0 ? 100.0 * (next.time_s / best.time_s - 1) : 0.0);
    note += line;
  }
  note += "; " + std::to_string(s.ranking.size()) + " strategies predicted";
  if (fitting < s.ranking.size()) {
    note += ", " + std::to_string(s.ranking.size() - fitting) + " beyond the memory per rank";
  }
  return note;
}

nlohmann::json auto_json(const RunStrategy& s) {
  if (s.ranking.empty()) return nullptr;
  nlohmann::json candidates = nlohmann::json::array();
  for (const RankedStrategy& r : s.ranking) {
    candidates.push_back({{"strategy", std::string(r.strategy->name())},
                          {"label", r.strategy->label(r.settings)},
                          {"predicted_time_s", r.time_s},
                          {"predicted_low_s", r.interval.low_s},
                          {"predicted_high_s", r.interval.high_s},
                          {"bytes_per_rank", r.bytes_per_rank},
                          {"fits", r.fits}});
  }
  return {{"picked", s.label()}, {"candidates", candidates}};
}

bool agree_predictions(Communicator& comm, const Options& o,
                       const std::vector<RankPlacement>& placement, const MatmulShape& shape,
                       const std::vector<RunStrategy>& strategies, bool train,
                       std::vector<PredictedRun>& predicted, std::ostream& err) {
  std::vector<double> unpredictable{0};
  if (comm.rank() == kRoot && o.model) {
    try {
      predicted =
          predict_runs(o, model_placement(o, comm.size(), placement), shape, strategies, train);
    } catch (const InputError& e) {
      err << "distmm: error: " << printable(e.what()) << std::endl;
      unpredictable[0] = 1;
    }
  }
  comm.broadcast(unpredictable, kRoot);
  return unpredictable[0] == 0;
}

}  // namespace distmm::cli

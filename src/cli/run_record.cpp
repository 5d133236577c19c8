#include "cli/run_record.hpp"
#include <array>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace distmm::cli {
namespace {

using nlohmann::json;

double mib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

template <typename F>
std::uint64_t max_over_ranks(const RunRecord& r, F&& field) {
  std::uint64_t m = 0;
  for (const RankFigures& f : r.per_rank) m = std::max<std::uint64_t>(m, field(f));
  return m;
}

}  // namespace

const char* dtype_name(DataType t) {
  return t == DataType::f32 ? "f32" : "f64";
}

std::vector<RankRuntime> gather_runtime(Communicator& comm, const RankRuntime& mine, int root) {
  const std::vector<double> row{mine.setup_s, static_cast<double>(mine.setup_page_faults),
                                static_cast<double>(mine.first_page_faults),
                                static_cast<double>(mine.page_faults),
                                static_cast<double>(mine.allocated_bytes)};
  std::vector<RankRuntime> out;
  const auto u = [](double x) { return static_cast<std::uint64_t>(x); };
  for (const auto& r : gather_values(comm, row, root)) {
    out.push_back({r[0], u(r[1]), u(r[2]), u(r[3]), u(r[4])});
  }
  return out;
}

void put_settings(json& run, const StrategySettings& settings) {
  for (const auto& [name, value] : settings.values()) {
    long long number = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (ec == std::errc() && end == value.data() + value.size()) {
      run[name] = number;
    } else {
      run[name] = value;
    }
  }
}

std::string label(const RunRecord& r) {
  return r.strategy->label(r.settings);
}

std::string table(const std::vector<RunRecord>& runs) {
  std::ostringstream out;
  char line[512];
  const bool predicting = !runs.empty() && runs.front().predicted.has_value();
  std::snprintf(line, sizeof line,
                "%-13s %-10s %5s %6s %8s %8s %8s %10s %11s %9s %12s %12s %11s %10s", "strategy",
                "backend", "dtype", "ranks", "m", "k", "n", "setup_s", "time_s", "GFLOP/s",
                "max_abs_err", "max_recv_MiB", "param_MiB", "peak_MiB");
  out << line << (predicting ? "  predicted_s  interval_80%_s\n" : "\n");
  for (const RunRecord& r : runs) {
    char setup[32] = "-", time[32] = "-", gflops[32] = "-", err[32] = "-";
    if (!r.dry_run) {
      std::snprintf(setup, sizeof setup, "%.6f", r.setup_s);
      std::snprintf(time, sizeof time, "%.6f", r.seconds);
      std::snprintf(gflops, sizeof gflops, "%.2f", r.shape.flops() / r.seconds / 1e9);
      std::snprintf(err, sizeof err, "%s", "not checked");
    }
    if (r.max_abs_error) std::snprintf(err, sizeof err, "%.3g", *r.max_abs_error);
    std::snprintf(
        line, sizeof line,
        "%-13s %-10s %5s %6d %8zu %8zu %8zu %10s %11s %9s %12s %12.2f %11.2f %10.2f",
        label(r).c_str(), r.backend.c_str(), dtype_name(r.dtype), r.ranks, r.shape.m, r.shape.k,
        r.shape.n, setup, time, gflops, err,
        mib(max_over_ranks(r, [](const RankFigures& f) { return f.bytes_received; })),
        mib(max_over_ranks(r, [](const RankFigures& f) { return f.persistent_param_bytes; })),
        mib(max_over_ranks(r, [](const RankFigures& f) { return f.peak_param_bytes; })));
    out << line;
    if (r.predicted) {
      std::snprintf(line, sizeof line, "  %11.6f  %.6f-%.6f", r.predicted_time_s,
                    r.predicted_interval.low_s, r.predicted_interval.high_s);
      out << line;
    }
    out << "\n";
  }
  std::vector<std::string> notes;
  for (const RunRecord& r : runs) {
    std::string n = r.strategy->note(r.settings);
    if (!n.empty() && std::find(notes.begin(), notes.end(), n) == notes.end()) {
      notes.push_back(std::move(n));
    }
  }
  for (const RunRecord& r : runs) {
    if (!r.auto_note.empty()) notes.push_back(r.auto_note);
  }
  for (const std::string& n : notes) out << n << "\n";
  if (!runs.empty() && runs.front().distributed) {
    out << "layout: distributed: each rank started with its blocks of A and B and ended with "
           "its block of C (time_s moves only what the strategy needs beyond them)\n";
  }
  if (predicting) {
    out << "predicted_s: the time model's prediction of time_s (--model " << runs.front().model_name
        << (runs.front().model_where.empty() ? "" : "; " + runs.front().model_where)
        << "); interval_80%_s: where time_s is expected 8 times in 10 (from the model's "
           "held-out error, docs/time-model.md)\n";
  }
  if (!runs.empty() && !runs.front().dry_run && runs.front().times_s.size() > 1) {
    out << "time_s: median of " << runs.front().times_s.size() << " timed executions after "
        << runs.front().warmup << " warm-up (--repeat, --warmup); setup_s: placing B, once\n";
  }
  if (!runs.empty() && !runs.front().placement.empty()) {
    out << "placement: " << placement(runs.front().placement) << "\n";
  }
  return out.str();
}

void put_prediction(nlohmann::json& run, const PredictedRun& p, double time_s,
                    const Interval& time) {
  run["predicted_time_s"] = time_s;
  run["predicted_low_s"] = time.low_s;
  run["predicted_high_s"] = time.high_s;
  run["predicted_cold_s"] = p.cold_s;
  run["predicted_cold_low_s"] = p.cold_interval.low_s;
  run["predicted_cold_high_s"] = p.cold_interval.high_s;
  run["predicted_warm_s"] = p.warm_s;
}

std::string report_json(const std::vector<RunRecord>& runs) {
  json doc;
  doc["distmm_version"] = "0.1.0";
  doc["runs"] = json::array();
  for (const RunRecord& r : runs) {
    json run{{"strategy", std::string(r.strategy->name())},
             {"backend", r.backend},
             {"dtype", dtype_name(r.dtype)},
             {"ranks", r.ranks},
             {"m", r.shape.m},
             {"k", r.shape.k},
             {"n", r.shape.n},
             {"dry_run", r.dry_run},
             {"layout", r.distributed ? "distributed" : "root"},
             {"time_s", nullptr},
             {"times_s", json::array()},
             {"setup_s", nullptr},
             {"warmup", r.warmup},
             {"gflops", nullptr},
             {"max_abs_error", nullptr},
             {"per_rank", json::array()}};
    if (!r.dry_run) {
      run["time_s"] = r.seconds;
      run["times_s"] = r.times_s;
      run["setup_s"] = r.setup_s;
      run["gflops"] = r.shape.flops() / r.seconds / 1e9;
    }
    if (r.max_abs_error) run["max_abs_error"] = *r.max_abs_error;
    if (!r.auto_pick.is_null()) run["auto"] = r.auto_pick;
    if (r.predicted) {
      put_prediction(run, *r.predicted, r.predicted_time_s, r.predicted_interval);
      run["predicted_setup_s"] = r.predicted->setup_s;
      run["model"] = r.model_name;
    }
    for (const RankFigures& f : r.per_rank) {
      const auto at = static_cast<std::size_t>(f.rank);
      const RankPlacement where = at < r.placement.size() ? r.placement[at] : RankPlacement{};
      json rank{{"rank", f.rank},
                {"host", where.host},
                {"cpus", where.cpus},
                {"blas_threads", where.blas_threads},
                {"a_rows", f.a_rows},
                {"param_elements", f.param_elements},
                {"bytes_sent", f.bytes_sent},
                {"bytes_received", f.bytes_received},
                {"messages_sent", f.messages_sent},
                {"messages_received", f.messages_received},
                {"comm_s", nullptr},
                {"compute_s", nullptr},
                {"persistent_param_bytes", f.persistent_param_bytes},
                {"peak_param_bytes", f.peak_param_bytes}};
      if (!r.dry_run) {
        rank["comm_s"] = f.comm_s;
        rank["compute_s"] = f.compute_s;
      }
      if (r.predicted && at < r.predicted->comm_s.size()) {
        rank["predicted_comm_s"] = r.predicted->comm_s[at];
        rank["predicted_compute_s"] = r.predicted->compute_s[at];
      }
      if (at < r.first_events.size()) {
        // Per communicator ("world", "ranks 0,2 of world", ...): the calls and bytes of
        // setup and the first execution, which add up to bytes_sent and bytes_received.
        const auto& names =
            at < r.communicators.size() ? r.communicators[at] : std::vector<std::string>{"world"};
        std::vector<std::array<std::uint64_t, 3>> sums(names.size(), {0, 0, 0});
        for (const TraceEvent& e : r.first_events[at]) {
          const auto c = static_cast<std::size_t>(e.comm);
          if (e.op == OpKind::compute || c >= sums.size()) continue;
          sums[c][0] += 1;
          sums[c][1] += e.bytes_sent;
          sums[c][2] += e.bytes_received;
        }
        json by = json::array();
        for (std::size_t c = 0; c < names.size(); ++c) {
          // The world always; a split communicator when this run used it.
          if (c > 0 && sums[c][0] == 0) continue;
          by.push_back({{"communicator", names[c]},
                        {"calls", sums[c][0]},
                        {"bytes_sent", sums[c][1]},
                        {"bytes_received", sums[c][2]}});
        }
        rank["communicators"] = by;
      }
      if (at < r.runtime.size()) {
        const RankRuntime& m = r.runtime[at];
        rank["setup_s"] = m.setup_s;
        rank["setup_page_faults"] = m.setup_page_faults;
        rank["first_page_faults"] = m.first_page_faults;
        rank["page_faults"] = m.page_faults;
        rank["allocated_bytes"] = m.allocated_bytes;
      }
      run["per_rank"].push_back(rank);
    }
    put_settings(run, r.settings);
    doc["runs"].push_back(run);
  }
  return doc.dump(2) + "\n";
}

std::string trace_json(const std::vector<RunRecord>& runs) {
  json events = json::array();
  const int ranks = runs.empty() ? 0 : runs.front().ranks;
  for (int r = 0; r < ranks; ++r) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", r},
                      {"tid", 0},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", r},
                      {"tid", 0},
                      {"args", {{"sort_index", r}}}});
  }
  // Runs one after another on the timeline, each starting where the last one ended.
  double offset_us = 0;
  for (const RunRecord& run : runs) {
    double end_us = offset_us;
    const std::string strategy(run.strategy->name());
    for (std::size_t r = 0; r < run.events.size(); ++r) {
      double first = 0, last = 0;
      for (const TraceEvent& e : run.events[r]) {
        const double ts = offset_us + e.start_s * 1e6, dur = e.duration_s * 1e6;
        json args{{"bytes_sent", e.bytes_sent}, {"bytes_received", e.bytes_received}};
        if (e.op == OpKind::compute) {
          args = {{"shape", std::to_string(e.rows) + "x" + std::to_string(e.inner) + " @ " +
                                std::to_string(e.inner) + "x" + std::to_string(e.cols)},
                  {"flops", 2.0 * static_cast<double>(e.rows) * static_cast<double>(e.inner) *
                                static_cast<double>(e.cols)}};
        } else {
          if (e.root >= 0) args["root"] = e.root;
          // Which communicator: "world", or the group a split made ("ranks 0,2 of world").
          const auto& names =
              r < run.communicators.size() ? run.communicators[r] : std::vector<std::string>{};
          const auto c = static_cast<std::size_t>(e.comm);
          args["communicator"] = c < names.size() ? names[c] : std::string("world");
        }
        events.push_back({{"name", std::string(name_of(e.op))},
                          {"cat", e.op == OpKind::compute ? "compute" : "communication"},
                          {"ph", "X"},
                          {"ts", ts},
                          {"dur", dur},
                          {"pid", static_cast<int>(r)},
                          {"tid", 0},
                          {"args", args}});
        if (first == 0 && last == 0) first = ts;
        last = std::max(last, ts + dur);
      }
      // One enclosing span per rank and run, named after the strategy.
      events.push_back({{"name", strategy},
                        {"cat", "strategy"},
                        {"ph", "X"},
                        {"ts", offset_us},
                        {"dur", std::max(last, offset_us) - offset_us},
                        {"pid", static_cast<int>(r)},
                        {"tid", 0},
                        {"args", {{"strategy", strategy}, {"backend", run.backend}}}});
      end_us = std::max(end_us, last);
    }
    offset_us = end_us + 10;
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace distmm::cli

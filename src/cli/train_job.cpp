#include "cli/train_job.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>

#include "cli/job_common.hpp"
#include "cli/run_record.hpp"
#include "distmm/checkpoint.hpp"
#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/plan.hpp"
#include "distmm/report.hpp"
#include "distmm/sharding.hpp"
#include "distmm/train.hpp"

namespace distmm::cli {
namespace {

using nlohmann::json;

// Largest accepted max|W - W_single| / max|W_single| against single-process SGD in the same
// element type: 1e-10 in double, 1e-4 in float.
double tolerance(DataType t) {
  return t == DataType::f32 ? 1e-4 : 1e-10;
}
// The collectives a training step uses, reported one by one.
constexpr OpKind kStepOps[] = {OpKind::allreduce, OpKind::allgatherv, OpKind::reduce_scatter};

struct Problem {
  arma::mat x, t, w0;
  MatmulShape shape;
};

std::string dims(const arma::mat& a) {
  return std::to_string(a.n_rows) + "x" + std::to_string(a.n_cols);
}

Problem load_problem(const Options& o) {
  const TrainOptions& to = o.train;
  check_output_files(o);
  Problem p;
  if (!to.x_file.empty()) {
    p.x = load_matrix(to.x_file, "--x");
    p.t = load_matrix(to.t_file, "--t");
    if (p.x.n_rows != p.t.n_rows) {
      throw InputError("--x " + to.x_file + " is " + dims(p.x) + " but --t " + to.t_file + " is " +
                           dims(p.t) + ": X and T must have the same number of rows",
                       -1, "--x");
    }
    p.shape = {p.x.n_rows, p.x.n_cols, p.t.n_cols};
  } else {
    p.shape = o.shape;  // synthetic: drawn by complete_problem() once it is known to fit
  }
  if (!to.w_file.empty()) {
    p.w0 = load_matrix(to.w_file, "--w");
    if (p.w0.n_rows != p.shape.k || p.w0.n_cols != p.shape.n) {
      throw InputError("--w " + to.w_file + " is " + dims(p.w0) + ", expected " +
                           std::to_string(p.shape.k) + "x" + std::to_string(p.shape.n) +
                           " (X's columns x T's columns)",
                       -1, "--w");
    }
  }
  return p;
}

// Draws the synthetic problem (T = X W* + noise, with X and W* standard normal, W* scaled by
// 1/sqrt(k)) and the zero initial W, where no file gave them.
void complete_problem(const Options& o, Problem& p) {
  if (o.train.x_file.empty()) {
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<double> normal;
    const auto draw = [&](std::size_t r, std::size_t c) {
      arma::mat a(r, c);
      a.imbue([&] { return normal(rng); });
      return a;
    };
    p.x = draw(p.shape.m, p.shape.k);
    const arma::mat w_star = draw(p.shape.k, p.shape.n) / std::sqrt(double(p.shape.k));
    p.t = p.x * w_star + o.train.noise * draw(p.shape.m, p.shape.n);
  }
  if (o.train.w_file.empty()) p.w0.zeros(p.shape.k, p.shape.n);
}

// What rank `rank` will hold at its peak in training: its rows of X and T and the step's
// buffers, the largest strategy's plan with its gradients, and on the root the problem, its
// row-major copies and the single-process reference run.
std::uint64_t train_memory_needed(const Options& o, const MatmulShape& s, int ranks, int rank,
                                  const std::vector<RunStrategy>& strategies) {
  const std::uint64_t m = s.m, k = s.k, n = s.n;
  std::uint64_t most = 0;
  for (const RunStrategy& r : strategies) {
    TrainConfig config;
    config.optimizer = o.train.adam ? Optimizer::adam : Optimizer::sgd;
    config.settings = r.settings;
    most = std::max(
        most, training_plan(*r.strategy, s, ranks, rank, size_of(o.dtype), config).allocated_bytes);
  }
  std::uint64_t elements = 0;
  if (rank == kRoot) elements += 2 * (m * k + m * n) + 4 * k * n + 2 * m * n;
  // The problem is drawn or read in double, then converted: count both on the root.
  const std::uint64_t as_read = rank == kRoot ? (m * k + m * n + k * n) * sizeof(double) : 0;
  return most + elements * size_of(o.dtype) + as_read;
}

// Per rank, per step: what crossed between ranks and what was held (see the README).
struct StepFigures {
  double bytes_sent = 0, bytes_received = 0, messages_sent = 0, messages_received = 0;
  double ring_bytes = 0, comm_s = 0, compute_s = 0;
  double persistent_bytes = 0, peak_bytes = 0;
  double optimizer_state_bytes = 0, data_rows = 0;  // of them Adam's M and V; its rows of X
  double op[std::size(kStepOps)][4] = {};           // calls, bytes sent, received, ring bytes

  std::vector<double> encode() const {
    std::vector<double> v{
        bytes_sent, bytes_received,   messages_sent, messages_received,     ring_bytes, comm_s,
        compute_s,  persistent_bytes, peak_bytes,    optimizer_state_bytes, data_rows};
    for (const auto& o : op) v.insert(v.end(), std::begin(o), std::end(o));
    return v;
  }
  static StepFigures decode(const std::vector<double>& v) {
    StepFigures f;
    f.bytes_sent = v[0];
    f.bytes_received = v[1];
    f.messages_sent = v[2];
    f.messages_received = v[3];
    f.ring_bytes = v[4];
    f.comm_s = v[5];
    f.compute_s = v[6];
    f.persistent_bytes = v[7];
    f.peak_bytes = v[8];
    f.optimizer_state_bytes = v[9];
    f.data_rows = v[10];
    for (std::size_t i = 0; i < std::size(kStepOps); ++i) {
      for (std::size_t j = 0; j < 4; ++j) f.op[i][j] = v[11 + 4 * i + j];
    }
    return f;
  }
  static StepFigures of(const RankStats& s, std::size_t steps) {
    const double per = 1.0 / static_cast<double>(steps);
    const OpCounters c = s.total_communication();
    StepFigures f;
    f.bytes_sent = static_cast<double>(c.bytes_sent) * per;
    f.bytes_received = static_cast<double>(c.bytes_received) * per;
    f.messages_sent = static_cast<double>(c.messages_sent) * per;
    f.messages_received = static_cast<double>(c.messages_received) * per;
    f.ring_bytes = c.ring_bytes * per;
    f.comm_s = c.seconds * per;
    f.compute_s = s.op(OpKind::compute).seconds * per;
    f.persistent_bytes = static_cast<double>(s.persistent_param_bytes());
    f.peak_bytes = static_cast<double>(s.peak_param_bytes());
    for (std::size_t i = 0; i < std::size(kStepOps); ++i) {
      const OpCounters& o = s.op(kStepOps[i]);
      f.op[i][0] = static_cast<double>(o.calls) * per;
      f.op[i][1] = static_cast<double>(o.bytes_sent) * per;
      f.op[i][2] = static_cast<double>(o.bytes_received) * per;
      f.op[i][3] = o.ring_bytes * per;
    }
    return f;
  }
};

struct TrainRun {
  RunStrategy strategy;
  std::optional<PredictedRun> predicted;  // with --model: per step (cold: the first)
  double seconds_per_step = 0;            // warm: the median of every step but the first
  double first_step_s = 0;                // cold: the first step
  std::vector<double> step_seconds;
  std::vector<double> losses;
  double max_rel_error = 0;
  std::vector<StepFigures> per_rank;
  std::vector<std::vector<TraceEvent>> events;
  std::vector<std::vector<std::string>> communicators;
  // Checkpoints: where the run resumed from and what it saved; per rank bytes written (over
  // every save), bytes read (when resuming) and seconds spent saving.
  std::size_t first_step = 0;
  std::string resumed_from;
  std::vector<std::string> saved;
  std::vector<std::vector<double>> checkpoint_io;
};

double mib(double bytes) {
  return bytes / (1024.0 * 1024.0);
}

std::string table(const std::vector<TrainRun>& runs, const Communicator& comm, const MatmulShape& s,
                  const Options& options) {
  const std::size_t steps = options.train.steps;
  const DataType dtype = options.dtype;
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line,
                "%-9s %-10s %5s %5s %7s %6s %6s %6s %12s %11s %8s %12s %11s %10s %10s %9s %9s\n",
                "strategy", "backend", "dtype", "ranks", "m", "k", "n", "steps", "first_step_s",
                "step_s", "GFLOP/s", "final_loss", "max_rel_err", "sent_MiB", "recv_MiB",
                "held_MiB", "peak_MiB");
  const bool predicting = !runs.empty() && runs.front().predicted.has_value();
  out << std::string(line, std::strlen(line) - 1)
      << (predicting ? "  pred_first_s           first_80%_s   pred_step_s            step_80%_s\n"
                     : "\n");
  const double flops = 3 * s.flops();  // forward, input gradient, weight gradient
  for (const TrainRun& r : runs) {
    double sent = 0, recv = 0, held = 0, peak = 0;
    for (const StepFigures& f : r.per_rank) {
      sent = std::max(sent, f.bytes_sent);
      recv = std::max(recv, f.bytes_received);
      held = std::max(held, f.persistent_bytes);
      peak = std::max(peak, f.peak_bytes);
    }
    std::snprintf(line, sizeof line,
                  "%-9s %-10s %5s %5d %7zu %6zu %6zu %6zu %12.6f %11.6f %8.2f %12.6e %11.3g "
                  "%10.3f %10.3f %9.3f %9.3f",
                  r.strategy.label().c_str(), comm.backend().c_str(), dtype_name(dtype),
                  comm.size(), s.m, s.k, s.n, steps, r.first_step_s, r.seconds_per_step,
                  flops / r.seconds_per_step / 1e9, r.losses.empty() ? 0.0 : r.losses.back(),
                  r.max_rel_error, mib(sent), mib(recv), mib(held), mib(peak));
    out << line;
    if (r.predicted) {
      const PredictedRun& p = *r.predicted;
      std::snprintf(line, sizeof line, "  %12.6f %10.6f-%10.6f %12.6f %10.6f-%10.6f", p.cold_s,
                    p.cold_interval.low_s, p.cold_interval.high_s, p.warm_s, p.warm_interval.low_s,
                    p.warm_interval.high_s);
      out << line;
    }
    out << "\n";
  }
  for (const TrainRun& r : runs) {
    if (!r.strategy.ranking.empty()) out << auto_note(options, r.strategy) << "\n";
  }
  out << "(first_step_s: the first step, cold; step_s: median of the others; sent/recv: most "
         "bytes any rank moved per step; held/peak: parameters + gradients + optimizer state per "
         "rank"
      << (predicting ? "; pred_*: the time model's prediction of first_step_s and step_s, "
                       "*_80%_s where they are expected 8 times in 10"
                     : "")
      << ")\n";
  return out.str();
}

// "1.50 MiB", "12.0 KiB", "640 B".
std::string bytes_text(double bytes) {
  char text[32];
  if (bytes >= 1024.0 * 1024.0) {
    std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1024.0 * 1024.0));
  } else if (bytes >= 1024.0) {
    std::snprintf(text, sizeof text, "%.1f KiB", bytes / 1024.0);
  } else {
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  }
  return text;
}

// "checkpoints: resumed from DIR/step-40 at step 40 (rank 0 read 1.00 MiB); saved DIR/step-60,
// DIR/step-80 (rank 0 wrote 2.00 MiB, over both saves, in 0.004 s)", or nothing.
std::string checkpoint_line(const TrainRun& r) {
  if (r.resumed_from.empty() && r.saved.empty()) return {};
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line.precision(2);
  line << "checkpoints:";
  if (!r.resumed_from.empty()) {
    line << " resumed from " << r.resumed_from << " at step " << r.first_step << " (rank 0 read "
         << bytes_text(r.checkpoint_io[0][1]) << ")" << (r.saved.empty() ? "" : ";");
  }
  if (!r.saved.empty()) {
    line << " saved ";
    if (r.saved.size() <= 3) {
      for (std::size_t i = 0; i < r.saved.size(); ++i) line << (i ? ", " : "") << r.saved[i];
    } else {
      line << r.saved.size() << ", " << r.saved.front() << " to " << r.saved.back();
    }
    line << " (rank 0 wrote " << bytes_text(r.checkpoint_io[0][0]) << " in all, in ";
    line.precision(3);
    line << r.checkpoint_io[0][2] << " s)";
  }
  return line.str() + "\n";
}

std::string report(const std::vector<TrainRun>& runs, const Communicator& comm,
                   const MatmulShape& s, const TrainOptions& t, DataType dtype,
                   const std::vector<RankPlacement>& placement) {
  json doc{{"distmm_version", "0.1.0"}, {"mode", "train"}, {"runs", json::array()}};
  const double psi = static_cast<double>(s.k * s.n * size_of(dtype));
  for (const TrainRun& r : runs) {
    json run{{"strategy", std::string(r.strategy.strategy->name())},
             {"backend", comm.backend()},
             {"dtype", dtype_name(dtype)},
             {"ranks", comm.size()},
             {"m", s.m},
             {"k", s.k},
             {"n", s.n},
             {"steps", t.steps},
             {"lr", t.lr},
             {"optimizer", t.adam ? "adam" : "sgd"},
             {"time_per_step_s", r.seconds_per_step},
             {"first_step_s", r.first_step_s},
             {"step_times_s", r.step_seconds},
             {"gflops", 3 * s.flops() / r.seconds_per_step / 1e9},
             {"losses", r.losses},
             {"first_step", r.first_step},
             {"resumed_from", r.resumed_from},
             {"checkpoints_saved", r.saved},
             {"max_rel_error", r.max_rel_error},
             {"parameter_bytes", psi},
             {"per_rank", json::array()}};
    if (!r.strategy.ranking.empty()) run["auto"] = auto_json(r.strategy);
    put_settings(run, r.strategy.settings);
    if (r.predicted) {
      // predicted_time_s predicts time_per_step_s, a warm step's.
      put_prediction(run, *r.predicted, r.predicted->warm_s, r.predicted->warm_interval);
    }
    for (const auto& [name, value] : r.strategy.strategy->training_report(psi)) run[name] = value;
    for (std::size_t rank = 0; rank < r.per_rank.size(); ++rank) {
      const StepFigures& f = r.per_rank[rank];
      // Adam's M and V follow the parameters the rank holds.
      const double state = f.optimizer_state_bytes;
      json per{{"rank", rank},
               {"host", rank < placement.size() ? placement[rank].host : std::string()},
               {"cpus", rank < placement.size() ? placement[rank].cpus : std::string()},
               {"blas_threads", rank < placement.size() ? placement[rank].blas_threads : 0},
               {"a_rows", f.data_rows},
               {"bytes_sent_per_step", f.bytes_sent},
               {"bytes_received_per_step", f.bytes_received},
               {"messages_sent_per_step", f.messages_sent},
               {"messages_received_per_step", f.messages_received},
               {"ring_bytes_per_step", f.ring_bytes},
               {"comm_s_per_step", f.comm_s},
               {"compute_s_per_step", f.compute_s},
               {"persistent_param_grad_bytes", f.persistent_bytes - state},
               {"peak_param_grad_bytes", f.peak_bytes - state},
               {"optimizer_state_bytes", state},
               {"predicted_comm_s_per_step",
                r.predicted ? json(r.predicted->comm_s.at(rank)) : json(nullptr)},
               {"predicted_compute_s_per_step",
                r.predicted ? json(r.predicted->compute_s.at(rank)) : json(nullptr)},
               {"checkpoint_bytes_written", r.checkpoint_io[rank][0]},
               {"checkpoint_bytes_read", r.checkpoint_io[rank][1]},
               {"checkpoint_save_s", r.checkpoint_io[rank][2]},
               {"collectives_per_step", json::array()}};
      for (std::size_t i = 0; i < std::size(kStepOps); ++i) {
        if (f.op[i][0] == 0) continue;
        per["collectives_per_step"].push_back({{"op", std::string(name_of(kStepOps[i]))},
                                               {"calls", f.op[i][0]},
                                               {"bytes_sent", f.op[i][1]},
                                               {"bytes_received", f.op[i][2]},
                                               {"ring_bytes", f.op[i][3]}});
      }
      run["per_rank"].push_back(per);
    }
    doc["runs"].push_back(run);
  }
  return doc.dump(2) + "\n";
}

}  // namespace

template <Element T>
int run_train_typed(Communicator& comm, const Options& options, const Problem& problem,
                    const MatmulShape& shape, const std::vector<RunStrategy>& strategies,
                    const std::vector<RankPlacement>& placement,
                    const std::vector<PredictedRun>& predicted, std::ostream& out,
                    std::ostream& err);

int run_train_dry_job(const Options& options, int ranks, std::ostream& out, std::ostream& err) {
  MatmulShape shape;
  try {
    shape = load_problem(options).shape;
  } catch (const InputError& e) {
    err << "distmm: error: " << printable(e.what()) << std::endl;
    return kBadInput;
  }
  const TrainOptions& to = options.train;
  const Optimizer optimizer = to.adam ? Optimizer::adam : Optimizer::sgd;
  const std::size_t bytes = size_of(options.dtype);
  const auto strategies = dry_run_strategies(options, ranks, shape, err);
  if (!strategies) return kBadInput;
  std::vector<PredictedRun> predicted;
  const ModelPlacement where = model_placement(options, ranks, {});
  try {
    predicted = predict_runs(options, where, shape, *strategies, true);
  } catch (const InputError& e) {
    err << "distmm: error: " << printable(e.what()) << std::endl;
    return kBadInput;
  }
  std::ostringstream predictions;
  // Saves in a run of --steps: after every K-th step and after the last.
  const std::size_t every = to.checkpoint_every;
  const std::size_t saves = to.checkpoint_dir.empty() ? 0
                            : every == 0              ? 1
                                         : to.steps / every + (to.steps % every != 0 ? 1 : 0);
  std::ostringstream table;
  char line[512];
  std::snprintf(line, sizeof line, "%-8s %5s %5s %14s %14s %14s %14s %14s %16s %16s\n", "strategy",
                "ranks", "rank", "sent_B/step", "recv_B/step", "param_grad_B", "peak_B",
                "optimizer_B", "ckpt_write_B", "ckpt_read_B");
  table << line;
  json doc{{"distmm_version", "0.1.0"},
           {"mode", "train"},
           {"dry_run", true},
           {"checkpoint_saves", saves},
           {"runs", json::array()}};
  for (const RunStrategy& s : *strategies) {
    TrainConfig config;
    config.optimizer = optimizer;
    config.settings = s.settings;
    json run{{"strategy", std::string(s.strategy->name())},
             {"ranks", ranks},
             {"dtype", dtype_name(options.dtype)},
             {"m", shape.m},
             {"k", shape.k},
             {"n", shape.n},
             {"optimizer", to.adam ? "adam" : "sgd"},
             {"per_rank", json::array()}};
    put_settings(run, s.settings);
    if (!s.ranking.empty()) {
      run["auto"] = auto_json(s);
      predictions << auto_note(options, s) << "\n";
    }
    for (int r = 0; r < ranks; ++r) {
      const TrainRankPlan plan = training_plan(*s.strategy, shape, ranks, r, bytes, config);
      const TrainStepFigures& f = plan.figures;
      const std::uint64_t write = checkpoint_write_bytes(plan.saved_block, bytes, optimizer);
      const std::uint64_t read = checkpoint_read_bytes(plan.saved_block, bytes, optimizer);
      std::snprintf(line, sizeof line,
                    "%-8s %5d %5d %14llu %14llu %14llu %14llu %14llu %16llu %16llu\n",
                    s.label().c_str(), ranks, r, static_cast<unsigned long long>(f.bytes_sent),
                    static_cast<unsigned long long>(f.bytes_received),
                    static_cast<unsigned long long>(f.persistent_param_grad_bytes),
                    static_cast<unsigned long long>(f.peak_param_grad_bytes),
                    static_cast<unsigned long long>(f.optimizer_state_bytes),
                    static_cast<unsigned long long>(write), static_cast<unsigned long long>(read));
      table << line;
      run["per_rank"].push_back({{"rank", r},
                                 {"bytes_sent_per_step", f.bytes_sent},
                                 {"bytes_received_per_step", f.bytes_received},
                                 {"persistent_param_grad_bytes", f.persistent_param_grad_bytes},
                                 {"peak_param_grad_bytes", f.peak_param_grad_bytes},
                                 {"optimizer_state_bytes", f.optimizer_state_bytes},
                                 {"checkpoint_bytes_written_per_save", write},
                                 {"checkpoint_bytes_read", read}});
    }
    if (!predicted.empty()) {
      const PredictedRun& p = predicted[doc["runs"].size()];
      put_prediction(run, p, p.warm_s, p.warm_interval);
      for (std::size_t r = 0; r < run["per_rank"].size(); ++r) {
        run["per_rank"][r]["predicted_comm_s_per_step"] = p.comm_s[r];
        run["per_rank"][r]["predicted_compute_s_per_step"] = p.compute_s[r];
      }
      std::snprintf(line, sizeof line,
                    "%-8s predicted: first step %.6f s (80 %%: %.6f-%.6f), step %.6f s (80 %%: "
                    "%.6f-%.6f)\n",
                    s.label().c_str(), p.cold_s, p.cold_interval.low_s, p.cold_interval.high_s,
                    p.warm_s, p.warm_interval.low_s, p.warm_interval.high_s);
      predictions << line;
    }
    doc["runs"].push_back(run);
  }
  if (!predicted.empty()) {
    predictions << "(predicted by --model " << options.model->name << ": " << describe(where)
                << ")\n";
  }
  out << table.str() << predictions.str() << "(per rank; ckpt_write_B: its shard file, per save"
      << (saves > 0 ? ", " : "")
      << (saves > 0 ? std::to_string(saves) + " saves in --steps " + std::to_string(to.steps)
                    : std::string())
      << "; ckpt_read_B: what it reads when resuming, of the block of W it owns)\n"
      << std::flush;
  if (options.report_file.empty()) return kSuccess;
  return write_outputs(err,
                       [&] { save_text(doc.dump(2) + "\n", options.report_file, "--report"); });
}

int run_train_job(Communicator& comm, const Options& options, std::ostream& out,
                  std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  if (!arm_fault(comm, options, err)) return kBadInput;
  Problem problem;
  const auto shared = share_shape(comm, err, [&] {
    problem = load_problem(options);
    return problem.shape;
  });
  if (!shared) return kBadInput;
  const MatmulShape shape = *shared;
  const std::vector<RankPlacement> placement = gather_placement(comm, kRoot);
  const auto strategies = agree_strategies(comm, options, placement, shape, err);
  if (!strategies) return kBadInput;
  if (!fits_in_memory(
          comm, train_memory_needed(options, shape, comm.size(), comm.rank(), *strategies),
          "X, T, W, their row-major copies, the single-process reference and the "
          "largest plan",
          "distmm --dry-run with the same --m --k --n shows what the plans hold", placement, err)) {
    return kBadInput;
  }
  std::vector<PredictedRun> predicted;
  if (!agree_predictions(comm, options, placement, shape, *strategies, true, predicted, err)) {
    return kBadInput;
  }
  if (root) complete_problem(options, problem);
  return options.dtype == DataType::f32
             ? run_train_typed<float>(comm, options, problem, shape, *strategies, placement,
                                      predicted, out, err)
             : run_train_typed<double>(comm, options, problem, shape, *strategies, placement,
                                       predicted, out, err);
}

template <Element T>
int run_train_typed(Communicator& comm, const Options& options, const Problem& problem,
                    const MatmulShape& shape, const std::vector<RunStrategy>& strategies,
                    const std::vector<RankPlacement>& placement,
                    const std::vector<PredictedRun>& predicted, std::ostream& out,
                    std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  const TrainOptions& to = options.train;
  const auto as_t = [](const arma::mat& x) { return arma::conv_to<arma::Mat<T>>::from(x); };
  const arma::Mat<T> x = as_t(problem.x), t = as_t(problem.t), w0 = as_t(problem.w0);
  TrainConfig config{to.steps, to.lr};
  config.optimizer = to.adam ? Optimizer::adam : Optimizer::sgd;
  config.checkpoint.save_dir = to.checkpoint_dir;
  config.checkpoint.every = to.checkpoint_every;
  config.checkpoint.keep = to.keep;
  config.checkpoint.resume = to.resume;
  if (root) {
    const auto crc = [](const arma::Mat<T>& a) {
      return crc32_of(a.memptr(), a.n_elem * sizeof(T));
    };
    config.checkpoint.x_crc32 = crc(x);
    config.checkpoint.t_crc32 = crc(t);
    config.checkpoint.w0_crc32 = crc(w0);
  }
  TrainResultOf<T> reference;
  if (root) reference = train_single_process(x, t, w0, config);

  std::vector<TrainRun> runs;
  arma::mat first_w;
  bool verified = true;
  const double bound = tolerance(options.dtype);
  for (const RunStrategy& s : strategies) {
    config.settings = s.settings;
    RankStats after;
    comm.barrier();
    TrainResultOf<T> result;
    try {
      result = train_linear(
          *s.strategy, comm, shape, x, t, w0, config, [&](std::size_t step, double loss) {
            if (root && ((step + 1) % to.print_every == 0 || step + 1 == to.steps)) {
              char line[128];
              std::snprintf(line, sizeof line, "%-6s step %6zu/%zu  loss %.9e\n",
                            std::string(s.strategy->name()).c_str(), step + 1, to.steps, loss);
              out << line << std::flush;
            }
            if (step + 1 == to.steps) after = comm.stats();  // before the final gather of W
          });
    } catch (const InputError& e) {
      // A bad checkpoint or --steps at or below it: every rank throws the same agreed error.
      if (root) err << "distmm: error: " << printable(e.what()) << std::endl;
      return kBadInput;
    } catch (const CheckpointWriteError& e) {
      if (root) err << "distmm: error: " << printable(e.what()) << std::endl;
      return kRunFailed;
    }
    TrainRun run{s, std::nullopt};
    if (!predicted.empty()) run.predicted = predicted[runs.size()];
    run.first_step = result.first_step;
    run.resumed_from = result.resumed_from;
    run.saved = result.saved;
    run.checkpoint_io = gather_values(comm,
                                      {static_cast<double>(result.bytes_written),
                                       static_cast<double>(result.bytes_read), result.save_seconds},
                                      kRoot);
    run.losses = result.losses;
    run.step_seconds = result.step_seconds;
    run.first_step_s = result.step_seconds.front();
    run.seconds_per_step =
        result.step_seconds.size() > 1
            ? median({result.step_seconds.begin() + 1, result.step_seconds.end()})
            : result.step_seconds.front();
    const std::size_t ran = result.step_seconds.size();
    StepFigures mine = StepFigures::of(after, ran);
    mine.optimizer_state_bytes = static_cast<double>(result.optimizer_state_bytes);
    mine.data_rows = static_cast<double>(result.data_rows);
    for (const auto& row : gather_values(comm, mine.encode(), kRoot)) {
      run.per_rank.push_back(StepFigures::decode(row));
    }
    if (!options.trace_file.empty()) {
      run.events = gather_events(comm, after.events(), kRoot);
      run.communicators = gather_communicators(comm, kRoot);
    }
    if (root) {
      const arma::mat w = arma::conv_to<arma::mat>::from(result.w);
      const arma::mat w_single = arma::conv_to<arma::mat>::from(reference.w);
      const double scale = std::max(arma::abs(w_single).max(), std::numeric_limits<double>::min());
      run.max_rel_error = arma::abs(w - w_single).max() / scale;
      if (!(run.max_rel_error <= bound)) {
        err << "distmm: verification failed: train " << s.strategy->name()
            << ": max |W - W_single| / max |W_single| = " << run.max_rel_error << " > " << bound
            << std::endl;
        verified = false;
      }
      if (first_w.is_empty()) first_w = w;
    }
    runs.push_back(std::move(run));
  }

  std::vector<double> code{0};
  if (root) {
    out << table(runs, comm, shape, options) << "placement: " << distmm::placement(placement)
        << "\n";
    for (const TrainRun& r : runs) out << checkpoint_line(r);
    out << std::flush;
    code[0] = verified ? kSuccess : kVerificationFailed;
    if (verified) {
      code[0] = write_outputs(err, [&] {
        if (!options.out_file.empty()) save_matrix(first_w, options.out_file, "--out");
        if (!options.report_file.empty()) {
          save_text(report(runs, comm, shape, to, options.dtype, placement), options.report_file,
                    "--report");
        }
        if (!options.trace_file.empty()) {
          std::vector<RunRecord> records;
          for (TrainRun& r : runs) {
            RunRecord rec{r.strategy.strategy,
                          r.strategy.settings,
                          comm.backend(),
                          comm.size(),
                          shape,
                          false};
            rec.events = std::move(r.events);
            rec.communicators = std::move(r.communicators);
            records.push_back(std::move(rec));
          }
          save_text(trace_json(records), options.trace_file, "--trace");
        }
      });
    }
  }
  comm.broadcast(code, kRoot);
  return static_cast<int>(code[0]);
}

}  // namespace distmm::cli

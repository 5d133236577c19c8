#include "cli/matmul_job.hpp"

#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <ostream>
#include <vector>

#include "cli/job_common.hpp"
#include "cli/run_record.hpp"
#include "distmm/draw.hpp"
#include "distmm/dry_run.hpp"
#include "distmm/error.hpp"
#include "distmm/layout.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/memory.hpp"
#include "distmm/plan.hpp"

namespace distmm::cli {
namespace {

// Rank 0's inputs, read or generated, after every check that can fail on bad input. A is held
// row-major (as A^T, k x m), the plans' layout; B column-major.
template <Element T>
struct Inputs {
  arma::Mat<T> a_t, b;
  MatmulShape shape;
};

// Reads --a/--b (a random problem is only sized here); keep_a = false for a dry run, which
// needs the shape alone.
template <Element T>
Inputs<T> load_inputs(const Options& o, bool keep_a) {
  Inputs<T> in;
  check_output_files(o);
  if (!o.a_file.empty()) {
    const arma::mat a = load_matrix(o.a_file, "--a");
    in.b = arma::conv_to<arma::Mat<T>>::from(load_matrix(o.b_file, "--b"));
    if (a.n_cols != in.b.n_rows) {
      throw InputError("--a " + o.a_file + " is " + std::to_string(a.n_rows) + "x" +
                           std::to_string(a.n_cols) + " but --b " + o.b_file + " is " +
                           std::to_string(in.b.n_rows) + "x" + std::to_string(in.b.n_cols) +
                           ": A's columns must equal B's rows",
                       -1, "--a");
    }
    in.shape = {a.n_rows, a.n_cols, in.b.n_cols};
    if (keep_a) in.a_t = arma::conv_to<arma::Mat<T>>::from(arma::mat(a.t()));
  } else {
    in.shape = o.shape;
  }
  return in;
}

// The random problem, entry by entry as random_entry() draws it (layout.hpp): the distributed
// layout draws the same blocks on their ranks.
template <Element T>
void generate_inputs(const Options& o, Inputs<T>& in) {
  const MatmulShape& s = in.shape;
  in.a_t = random_block<T>(o.seed, 0, {0, s.m, 0, s.k}, true);
  in.b = random_block<T>(o.seed, 1, {0, s.k, 0, s.n}, false);
}

// What rank `rank` will hold at its peak: the largest of the strategies' plans, and on the
// root A, B, C, the reference product and the copies --out makes.
std::uint64_t matmul_memory_needed(const Options& o, const MatmulShape& s, int ranks, int rank,
                                   const std::vector<RunStrategy>& strategies) {
  std::uint64_t most = 0;
  for (const RunStrategy& r : strategies) {
    most = std::max(
        most, plan_allocation(*r.strategy, s, ranks, rank, size_of(o.dtype), kRoot, r.settings));
  }
  if (rank != kRoot) return most;
  const std::uint64_t c = static_cast<std::uint64_t>(s.m) * s.n;
  std::uint64_t elements = static_cast<std::uint64_t>(s.m) * s.k + s.k * s.n + c;
  if (o.verify) elements += c;
  if (!o.out_file.empty()) elements += 2 * c;
  return most + elements * size_of(o.dtype) + (o.out_file.empty() ? 0 : 8 * c);
}

// Rank 0 writes the table and the requested files; returns the exit code.
int finish(const Options& o, const std::vector<RunRecord>& runs, const arma::mat* c, bool verified,
           std::ostream& out, std::ostream& err) {
  out << table(runs) << std::flush;
  if (!verified) return kVerificationFailed;
  return write_outputs(err, [&] {
    // The picture first: a strategy it cannot draw leaves no file written.
    std::string svg;
    if (!o.draw_file.empty()) {
      const RunRecord& r = runs.front();
      svg = sharding_svg(*r.strategy, r.shape, r.ranks, r.settings);
    }
    if (c != nullptr && !o.out_file.empty()) save_matrix(*c, o.out_file, "--out");
    if (!o.report_file.empty()) save_text(report_json(runs), o.report_file, "--report");
    if (!o.trace_file.empty()) save_text(trace_json(runs), o.trace_file, "--trace");
    if (!o.draw_file.empty()) save_text(svg, o.draw_file, "--draw");
  });
}

// Largest accepted max|C - A*B| relative to max|A*B|: k (at least 8) rounding errors of T.
template <Element T>
double tolerance(std::size_t k) {
  return static_cast<double>(std::max<std::size_t>(k, 8)) * std::numeric_limits<T>::epsilon();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// This rank's block of A (transposed) and of B before the timing: drawn here from the seed,
// or, with --a/--b, sent by the root (which reads the files) to each rank.
template <Element T>
void place_blocks(Communicator& comm, const Options& o, const Inputs<T>& in,
                  const MatmulShape& shape, const Strategy& s, const StrategySettings& settings,
                  arma::Mat<T>& a_t, arma::Mat<T>& b) {
  const BlockLayout mine = *s.distributed_blocks(shape, comm.size(), comm.rank(), settings);
  if (o.a_file.empty()) {
    a_t = random_block<T>(o.seed, 0, mine.a, true);
    b = random_block<T>(o.seed, 1, mine.b, false);
    return;
  }
  // A's block of rows R and columns K is the block (K, R) of A^T, the root's a_t.
  const auto of_a_t = [](const Block& x) { return Block{x.col0, x.cols, x.row0, x.rows}; };
  constexpr int kTag = 72;
  if (comm.rank() != kRoot) {
    a_t.set_size(mine.a.cols, mine.a.rows);
    b.set_size(mine.b.rows, mine.b.cols);
    if (a_t.n_elem > 0) comm.recv(a_t, kRoot, kTag);
    if (b.n_elem > 0) comm.recv(b, kRoot, kTag);
    return;
  }
  for (int q = 0; q < comm.size(); ++q) {
    const BlockLayout theirs = *s.distributed_blocks(shape, comm.size(), q, settings);
    arma::Mat<T> qa = block_of(in.a_t, of_a_t(theirs.a), false),
                 qb = block_of(in.b, theirs.b, false);
    if (q == kRoot) {
      a_t = std::move(qa);
      b = std::move(qb);
      continue;
    }
    if (qa.n_elem > 0) comm.send(qa, q, kTag);
    if (qb.n_elem > 0) comm.send(qb, q, kTag);
  }
}

// --layout distributed: each strategy's plan from this rank's blocks, executed --warmup +
// --repeat times from its A block into its C block; C assembled on the root only to check it
// and write it, outside the timing.
template <Element T>
int run_distributed(Communicator& comm, const Options& o, const Inputs<T>& in,
                    const MatmulShape& shape, const std::vector<RankPlacement>& placement,
                    const std::vector<RunStrategy>& strategies,
                    const std::vector<PredictedRun>& predicted, std::ostream& out,
                    std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  const bool per_thread = comm.backend() == "simulator";
  arma::Mat<T> reference;
  if (root && o.verify) reference = arma::Mat<T>((in.b.t() * in.a_t).t());
  std::vector<RunRecord> runs;
  arma::mat first_c;
  bool verified = true;
  for (const RunStrategy& s : strategies) {
    RunRecord run{s.strategy, s.settings, comm.backend(), comm.size(), shape, false};
    run.auto_note = auto_note(o, s);
    run.auto_pick = auto_json(s);
    run.dtype = o.dtype;
    run.warmup = o.warmup;
    run.distributed = true;
    if (!predicted.empty()) {
      const PredictedRun& p = predicted[runs.size()];
      run.predicted = p;
      run.predicted_time_s = predicted_median(p, o.warmup, o.repeat);
      run.predicted_interval = predicted_interval(p, o.warmup, o.repeat);
      run.model_name = o.model->name;
    }
    arma::Mat<T> a_t, b;
    place_blocks(comm, o, in, shape, *s.strategy, s.settings, a_t, b);
    RankRuntime mine;
    comm.barrier();
    comm.stats().reset();
    std::uint64_t faults = minor_page_faults(per_thread);
    auto start = std::chrono::steady_clock::now();
    const auto plan = s.strategy->distributed_plan(comm, shape, b, s.settings);
    mine.setup_s = seconds_since(start);
    mine.setup_page_faults = minor_page_faults(per_thread) - faults;
    const Block& c_block = plan->blocks().c;
    arma::Mat<T> c_t = fresh_matrix<T>(c_block.cols, c_block.rows);
    RankFigures figures;
    for (std::size_t i = 0; i < o.warmup + o.repeat; ++i) {
      comm.barrier();
      faults = minor_page_faults(per_thread);
      start = std::chrono::steady_clock::now();
      plan->execute(a_t, c_t);
      const double seconds = seconds_since(start);
      const std::uint64_t faulted = minor_page_faults(per_thread) - faults;
      if (i == 0) {
        mine.first_page_faults = faulted;
        figures = measured(comm, sizeof(T));
      }
      if (i >= o.warmup) {
        run.times_s.push_back(seconds);
        mine.page_faults += faulted;
      }
    }
    run.seconds = median(run.times_s);
    run.setup_s = mine.setup_s;
    run.per_rank = gather_figures(comm, figures, kRoot);
    run.runtime = gather_runtime(comm, mine, kRoot);
    run.placement = placement;
    if (o.verify || (!o.out_file.empty() && runs.empty())) {
      const arma::Mat<T> c = assemble_blocks(comm, c_block, c_t, shape.m, shape.n, kRoot);
      if (root && o.verify) {
        const double error = c.n_elem ? static_cast<double>(arma::abs(c - reference).max()) : 0;
        const double scale = c.n_elem ? static_cast<double>(arma::abs(reference).max()) : 0;
        run.max_abs_error = error;
        if (!(error <=
              tolerance<T>(shape.k) * std::max(scale, std::numeric_limits<double>::min()))) {
          err << "distmm: verification failed: " << s.strategy->name()
              << " (--layout distributed): max |C - A*B| = " << error << std::endl;
          verified = false;
        }
      }
      if (root && runs.empty()) first_c = arma::conv_to<arma::mat>::from(c);
    }
    runs.push_back(std::move(run));
  }
  std::vector<double> code{0};
  if (root) code[0] = finish(o, runs, &first_c, verified, out, err);
  comm.broadcast(code, kRoot);
  return static_cast<int>(code[0]);
}

template <Element T>
int run_typed(Communicator& comm, const Options& options, std::ostream& out, std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  if (!arm_fault(comm, options, err)) return kBadInput;
  Inputs<T> in;
  // Files are read here; a random problem is only sized, and drawn once it is known to fit.
  const auto shared = share_shape(comm, err, [&] {
    in = load_inputs<T>(options, true);
    return in.shape;
  });
  if (!shared) return kBadInput;
  const MatmulShape shape = *shared;

  const std::vector<RankPlacement> placement = gather_placement(comm, kRoot);
  const auto strategies = agree_strategies(comm, options, placement, shape, err);
  if (!strategies) return kBadInput;
  if (!fits_in_memory(comm,
                      matmul_memory_needed(options, shape, comm.size(), comm.rank(), *strategies),
                      "A, B, C" + std::string(options.verify ? ", the reference product" : "") +
                          " and the largest plan",
                      "--dry-run shows what each rank holds", placement, err)) {
    return kBadInput;
  }
  // --model: every strategy's prediction first, so a model that cannot cost one stops the
  // run before anything runs.
  std::vector<PredictedRun> predicted;
  if (!agree_predictions(comm, options, placement, shape, *strategies, false, predicted, err)) {
    return kBadInput;
  }
  // The distributed layout draws each rank's blocks on it; the root draws the whole problem
  // only to check the result.
  if (root && options.a_file.empty() && (!options.distributed || options.verify)) {
    generate_inputs(options, in);
  }
  if (options.distributed) {
    return run_distributed<T>(comm, options, in, shape, placement, *strategies, predicted, out,
                              err);
  }
  // C^T = B^T A^T: the single-process product, in the plans' row-major layout.
  arma::Mat<T> reference_t;
  if (root && options.verify) reference_t = in.b.t() * in.a_t;
  // Ranks that are threads of one process count their own page faults.
  const bool per_thread = comm.backend() == "simulator";
  // C, row-major (C^T), on the root: the plans write it in place.
  arma::Mat<T> c_t = root ? fresh_matrix<T>(shape.n, shape.m) : arma::Mat<T>();

  std::vector<RunRecord> runs;
  arma::Mat<T> first_c_t;
  bool verified = true;
  for (const RunStrategy& s : *strategies) {
    RunRecord run{s.strategy, s.settings, comm.backend(), comm.size(), shape, false};
    run.auto_note = auto_note(options, s);
    run.auto_pick = auto_json(s);
    run.dtype = options.dtype;
    run.warmup = options.warmup;
    if (!predicted.empty()) {
      const PredictedRun& p = predicted[runs.size()];
      run.predicted = p;
      run.predicted_time_s = predicted_median(p, options.warmup, options.repeat);
      run.predicted_interval = predicted_interval(p, options.warmup, options.repeat);
      run.model_name = options.model->name;
    }
    RankRuntime mine;
    comm.barrier();
    comm.stats().reset();
    std::uint64_t faults = minor_page_faults(per_thread);
    auto start = std::chrono::steady_clock::now();
    const auto plan = make_plan(*s.strategy, comm, shape, in.b, kRoot, s.settings);
    mine.setup_s = seconds_since(start);
    mine.setup_page_faults = minor_page_faults(per_thread) - faults;
    mine.allocated_bytes = plan->allocated_bytes();

    RankFigures figures;
    std::vector<TraceEvent> first_events;
    double comm_s = 0, compute_s = 0;
    double max_error = 0;
    const std::size_t executions = options.warmup + options.repeat;
    for (std::size_t i = 0; i < executions; ++i) {
      const bool timed = i >= options.warmup;
      // Poisoned, so a block no rank wrote cannot pass for a result.
      if (root && options.verify) c_t.fill(arma::Datum<T>::nan);
      comm.barrier();
      const double comm_before = comm.stats().total_communication().seconds;
      const double compute_before = comm.stats().op(OpKind::compute).seconds;
      faults = minor_page_faults(per_thread);
      start = std::chrono::steady_clock::now();
      plan->execute(in.a_t, c_t);
      const double seconds = seconds_since(start);
      const std::uint64_t faulted = minor_page_faults(per_thread) - faults;
      if (i == 0) {
        mine.first_page_faults = faulted;
        // Setup and one execution: what the README's formulas count.
        figures = measured(comm, sizeof(T));
        if (!options.report_file.empty()) first_events = comm.stats().events();
      }
      if (timed) {
        run.times_s.push_back(seconds);
        mine.page_faults += faulted;
        comm_s += comm.stats().total_communication().seconds - comm_before;
        compute_s += comm.stats().op(OpKind::compute).seconds - compute_before;
      }
      if (root && options.verify) {
        const double error =
            c_t.n_elem ? static_cast<double>(arma::abs(c_t - reference_t).max()) : 0.0;
        max_error = std::isnan(error) ? error : std::max(max_error, error);  // NaN sticks
      }
    }
    figures.comm_s = comm_s / static_cast<double>(options.repeat);
    figures.compute_s = compute_s / static_cast<double>(options.repeat);
    const std::vector<TraceEvent> events = comm.stats().events();

    run.seconds = median(run.times_s);
    run.setup_s = mine.setup_s;
    run.per_rank = gather_figures(comm, figures, kRoot);
    run.runtime = gather_runtime(comm, mine, kRoot);
    run.placement = placement;
    if (!options.trace_file.empty()) run.events = gather_events(comm, events, kRoot);
    if (!options.report_file.empty()) run.first_events = gather_events(comm, first_events, kRoot);
    if (!options.trace_file.empty() || !options.report_file.empty()) {
      run.communicators = gather_communicators(comm, kRoot);
    }
    if (root && options.verify) {
      const double scale =
          reference_t.n_elem ? static_cast<double>(arma::abs(reference_t).max()) : 0.0;
      const double bound = tolerance<T>(shape.k);
      run.max_abs_error = max_error;
      if (!(max_error <= bound * std::max(scale, std::numeric_limits<double>::min()))) {
        err << "distmm: verification failed: " << s.strategy->name()
            << ": max |C - A*B| = " << max_error << ", relative " << max_error / scale << " > "
            << bound << " (k eps of " << name_of(options.dtype) << ")" << std::endl;
        verified = false;
      }
    }
    if (root && !options.out_file.empty() && first_c_t.is_empty()) first_c_t = c_t;
    runs.push_back(std::move(run));
  }

  std::vector<double> code{0};
  if (root) {
    // --out: the first strategy's C, as computed (a float is exact as a double).
    const arma::mat first_c = arma::conv_to<arma::mat>::from(arma::Mat<T>(first_c_t.t()));
    code[0] = finish(options, runs, &first_c, verified, out, err);
  }
  comm.broadcast(code, kRoot);
  return static_cast<int>(code[0]);
}

}  // namespace

int run_matmul_job(Communicator& comm, const Options& options, std::ostream& out,
                   std::ostream& err) {
  return options.dtype == DataType::f32 ? run_typed<float>(comm, options, out, err)
                                        : run_typed<double>(comm, options, out, err);
}

int run_dry_job(const Options& options, int ranks, std::ostream& out, std::ostream& err) {
  Inputs<double> in;
  try {
    in = load_inputs<double>(options, false);
  } catch (const InputError& e) {
    err << "distmm: error: " << printable(e.what()) << std::endl;
    return kBadInput;
  }
  const auto strategies = dry_run_strategies(options, ranks, in.shape, err);
  if (!strategies) return kBadInput;
  const ModelPlacement where = model_placement(options, ranks, {});
  // Each strategy's dry run and prediction are independent: side by side (a 1e6^3 dry run on
  // 4096 ranks spends seconds replaying fsdp-overlap's ring and grid's panels).
  const auto one = [&](std::size_t i) {
    const RunStrategy& s = (*strategies)[i];
    RunRecord run{s.strategy, s.settings, "dry-run", ranks, in.shape, true};
    run.auto_note = auto_note(options, s);
    run.auto_pick = auto_json(s);
    run.dtype = options.dtype;
    run.warmup = options.warmup;
    // One dry run serves the figures (its setup and first execution) and the prediction (its
    // two executions, cold and warm).
    run.distributed = options.distributed;
    const DryRun dry =
        dry_run(*s.strategy, in.shape, ranks, options.dtype, s.settings, 2, options.distributed);
    if (options.model) {
      // Only the first strategy finds the caller's A and C new (predict_runs says why); auto
      // predicted its pick already.
      run.predicted = !s.ranking.empty()
                          ? s.ranking.front().predicted
                          : predict_time(*options.model, where, dry, in.shape,
                                         size_of(options.dtype), false, FreshMemory{i == 0});
      run.predicted_time_s = predicted_median(*run.predicted, options.warmup, options.repeat);
      run.predicted_interval = predicted_interval(*run.predicted, options.warmup, options.repeat);
      run.model_name = options.model->name;
      run.model_where = describe(where);
    }
    for (int r = 0; r < ranks; ++r) {
      run.per_rank.push_back(planned(dry, r, size_of(options.dtype)));
    }
    return run;
  };
  std::vector<std::future<RunRecord>> pending;
  for (std::size_t i = 0; i < strategies->size(); ++i) {
    pending.push_back(std::async(std::launch::async, one, i));
  }
  std::vector<RunRecord> runs;
  for (auto& p : pending) {
    try {
      runs.push_back(p.get());
    } catch (const InputError& e) {  // a model that cannot cost the run
      err << "distmm: error: " << printable(e.what()) << std::endl;
      return kBadInput;
    }
  }
  return finish(options, runs, nullptr, true, out, err);
}

}  // namespace distmm::cli

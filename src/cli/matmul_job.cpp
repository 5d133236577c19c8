#include "cli/matmul_job.hpp"

#include <chrono>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "cli/job_common.hpp"
#include "cli/run_record.hpp"
#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"

namespace distmm::cli {
namespace {

// Largest accepted relative error max|C - A*B| / max|A*B| for double results.
constexpr double kTolerance = 1e-12;

arma::mat random_matrix(std::mt19937_64& rng, std::size_t rows, std::size_t cols) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  arma::mat x(rows, cols);
  x.imbue([&] { return uniform(rng); });
  return x;
}

// Rank 0's inputs, read or generated, after every check that can fail on bad input.
struct Inputs {
  arma::mat a, b;
  MatmulShape shape;
};

Inputs load_inputs(const Options& o, bool generate) {
  Inputs in;
  check_output_files(o);
  if (!o.a_file.empty()) {
    in.a = load_matrix(o.a_file, "--a");
    in.b = load_matrix(o.b_file, "--b");
    if (in.a.n_cols != in.b.n_rows) {
      throw InputError("--a " + o.a_file + " is " + std::to_string(in.a.n_rows) + "x" +
                           std::to_string(in.a.n_cols) + " but --b " + o.b_file + " is " +
                           std::to_string(in.b.n_rows) + "x" + std::to_string(in.b.n_cols) +
                           ": A's columns must equal B's rows",
                       -1, "--a");
    }
    in.shape = {in.a.n_rows, in.a.n_cols, in.b.n_cols};
  } else {
    in.shape = o.shape;
    if (generate) {
      std::mt19937_64 rng(o.seed);
      in.a = random_matrix(rng, in.shape.m, in.shape.k);
      in.b = random_matrix(rng, in.shape.k, in.shape.n);
    }
  }
  return in;
}

// Rank 0 writes the table and the requested files; returns the exit code.
int finish(const Options& o, const std::vector<RunRecord>& runs, const arma::mat* c, bool verified,
           std::ostream& out, std::ostream& err) {
  out << table(runs) << std::flush;
  if (!verified) return kVerificationFailed;
  return write_outputs(err, [&] {
    if (c != nullptr && !o.out_file.empty()) save_matrix(*c, o.out_file, "--out");
    if (!o.report_file.empty()) save_text(report_json(runs), o.report_file, "--report");
    if (!o.trace_file.empty()) save_text(trace_json(runs), o.trace_file, "--trace");
  });
}

}  // namespace

int run_matmul_job(Communicator& comm, const Options& options, std::ostream& out,
                   std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  if (options.fault.kind == FaultPlan::Kind::crash || options.fault.kind == FaultPlan::Kind::skip) {
    if (options.fault.rank >= comm.size()) {
      if (root) {
        err << "distmm: error: --fault " << options.fault.spec << ": rank " << options.fault.rank
            << " does not exist in a run of " << comm.size() << " ranks" << std::endl;
      }
      return kBadInput;
    }
  }
  comm.inject(options.fault);
  Inputs in;
  const auto shared = share_shape(comm, err, [&] {
    in = load_inputs(options, true);
    return in.shape;
  });
  if (!shared) return kBadInput;
  const MatmulShape shape = *shared;

  const std::vector<std::string> hosts = gather_hosts(comm, kRoot);
  arma::mat reference;
  if (root && options.verify) reference = in.a * in.b;

  std::vector<RunRecord> runs;
  arma::mat first_c;
  bool verified = true;
  for (Strategy s : options.strategies) {
    comm.barrier();
    comm.stats().reset();
    const auto start = std::chrono::steady_clock::now();
    arma::mat c = matmul(s, comm, shape, in.a, in.b, kRoot);
    const auto stop = std::chrono::steady_clock::now();
    // Snapshot before gathering: the gathers below are counted too.
    const RankFigures mine = measured(s, shape, comm);
    const std::vector<TraceEvent> events = comm.stats().events();

    RunRecord run{s,     comm.backend(), comm.size(),
                  shape, false,          std::chrono::duration<double>(stop - start).count()};
    run.per_rank = gather_figures(comm, mine, kRoot);
    run.hosts = hosts;
    if (!options.trace_file.empty()) run.events = gather_events(comm, events, kRoot);
    if (root && options.verify) {
      const double error = c.n_elem ? arma::abs(c - reference).max() : 0.0;
      const double scale = reference.n_elem ? arma::abs(reference).max() : 0.0;
      run.max_abs_error = error;
      if (error > kTolerance * std::max(scale, std::numeric_limits<double>::min())) {
        err << "distmm: verification failed: " << name_of(s) << ": max |C - A*B| = " << error
            << ", relative " << error / scale << " > " << kTolerance << std::endl;
        verified = false;
      }
    }
    if (root && first_c.is_empty()) first_c = std::move(c);
    runs.push_back(std::move(run));
  }

  std::vector<double> code{0};
  if (root) code[0] = finish(options, runs, &first_c, verified, out, err);
  comm.broadcast(code, kRoot);
  return static_cast<int>(code[0]);
}

int run_dry_job(const Options& options, int ranks, std::ostream& out, std::ostream& err) {
  Inputs in;
  try {
    in = load_inputs(options, false);
  } catch (const InputError& e) {
    err << "distmm: error: " << e.what() << std::endl;
    return kBadInput;
  }
  std::vector<RunRecord> runs;
  for (Strategy s : options.strategies) {
    RunRecord run{s, "dry-run", ranks, in.shape, true};
    for (int r = 0; r < ranks; ++r) run.per_rank.push_back(predict(s, in.shape, ranks, r, 8));
    runs.push_back(std::move(run));
  }
  return finish(options, runs, nullptr, true, out, err);
}

}  // namespace distmm::cli

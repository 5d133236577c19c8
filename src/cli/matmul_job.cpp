#include "cli/matmul_job.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"

namespace distmm::cli {
namespace {

constexpr int kRoot = 0;
// Largest accepted relative error max|C - A*B| / max|A*B| for double results.
constexpr double kTolerance = 1e-12;

arma::mat random_matrix(std::mt19937_64& rng, std::size_t rows, std::size_t cols) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  arma::mat x(rows, cols);
  x.imbue([&] { return uniform(rng); });
  return x;
}

// Rank 0's inputs, read or generated, with every check that can fail on bad input.
struct Inputs {
  arma::mat a, b;
  MatmulShape shape;
};

Inputs load_inputs(const Options& o) {
  Inputs in;
  if (!o.out_file.empty()) check_output_path(o.out_file, "--out");
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
    std::mt19937_64 rng(o.seed);
    in.shape = o.shape;
    in.a = random_matrix(rng, in.shape.m, in.shape.k);
    in.b = random_matrix(rng, in.shape.k, in.shape.n);
  }
  return in;
}

struct Row {
  Strategy strategy;
  double seconds = 0;
  std::optional<double> max_abs_error;
  bool verified = true;
};

void print_table(std::ostream& out, const Communicator& comm, const MatmulShape& shape,
                 const std::vector<Row>& rows) {
  out << std::left << std::setw(10) << "strategy" << std::setw(11) << "backend" << std::right
      << std::setw(6) << "ranks" << std::setw(8) << "m" << std::setw(8) << "k" << std::setw(8)
      << "n" << std::setw(12) << "time_s" << std::setw(10) << "GFLOP/s" << std::setw(14)
      << "max_abs_err"
      << "\n";
  for (const Row& r : rows) {
    char err[32] = "not checked";
    if (r.max_abs_error) std::snprintf(err, sizeof err, "%.3g", *r.max_abs_error);
    out << std::left << std::setw(10) << name_of(r.strategy) << std::setw(11) << comm.backend()
        << std::right << std::setw(6) << comm.size() << std::setw(8) << shape.m << std::setw(8)
        << shape.k << std::setw(8) << shape.n << std::setw(12) << std::fixed << std::setprecision(6)
        << r.seconds << std::setw(10) << std::setprecision(2) << shape.flops() / r.seconds / 1e9
        << std::setw(14) << err << "\n";
  }
  out.flush();
}

}  // namespace

int run_matmul_job(Communicator& comm, const Options& options, std::ostream& out,
                   std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  // Rank 0 loads; one broadcast tells every rank the shape, or that the input was bad.
  Inputs in;
  std::vector<double> header{0, 0, 0, 0};
  if (root) {
    try {
      in = load_inputs(options);
      header = {0, static_cast<double>(in.shape.m), static_cast<double>(in.shape.k),
                static_cast<double>(in.shape.n)};
    } catch (const InputError& e) {
      err << "distmm: error: " << e.what() << std::endl;
      header[0] = kBadInput;
    }
  }
  comm.broadcast(header, kRoot);
  if (header[0] != 0) return kBadInput;
  const MatmulShape shape{static_cast<std::size_t>(header[1]), static_cast<std::size_t>(header[2]),
                          static_cast<std::size_t>(header[3])};

  arma::mat reference;
  if (root && options.verify) reference = in.a * in.b;

  std::vector<Row> rows;
  arma::mat first_c;
  bool all_verified = true;
  for (Strategy s : options.strategies) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    arma::mat c = matmul(s, comm, shape, in.a, in.b, kRoot);
    const auto stop = std::chrono::steady_clock::now();
    Row row{s, std::chrono::duration<double>(stop - start).count(), std::nullopt, true};
    if (root && options.verify) {
      const double error = c.n_elem ? arma::abs(c - reference).max() : 0.0;
      const double scale = reference.n_elem ? arma::abs(reference).max() : 0.0;
      row.max_abs_error = error;
      row.verified = error <= kTolerance * std::max(scale, std::numeric_limits<double>::min());
      if (!row.verified) {
        err << "distmm: verification failed: " << name_of(s) << ": max |C - A*B| = " << error
            << ", relative " << error / scale << " > " << kTolerance << std::endl;
        all_verified = false;
      }
    }
    if (root && first_c.is_empty()) first_c = std::move(c);
    rows.push_back(row);
  }

  std::vector<double> code{0};
  if (root) {
    print_table(out, comm, shape, rows);
    code[0] = all_verified ? kSuccess : kVerificationFailed;
    if (all_verified && !options.out_file.empty()) {
      try {
        save_matrix(first_c, options.out_file, "--out");
      } catch (const InputError& e) {
        err << "distmm: error: " << e.what() << std::endl;
        code[0] = kRunFailed;
      }
    }
  }
  comm.broadcast(code, kRoot);
  return static_cast<int>(code[0]);
}

}  // namespace distmm::cli

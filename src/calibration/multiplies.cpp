// Multiplies: the gemm curves, a first use's cost, rounds of a reference multiply.
#include <algorithm>
#include <armadillo>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>

#include "calibration/measure.hpp"
#include "distmm/blas.hpp"
#include "distmm/memory.hpp"
#include "local_multiply.hpp"

namespace distmm::calibration {

double multiply_gflops(const arma::mat& a, const arma::mat& b, arma::mat& c, double seconds,
                       std::size_t runs, bool warm_up) {
  const double flops = 2.0 * static_cast<double>(a.n_rows) * static_cast<double>(a.n_cols) *
                       static_cast<double>(b.n_cols);
  return gflops_of([&] { c = a * b; }, flops, seconds, runs, warm_up);
}

// GFLOP/s of n x n x n multiplies (and the narrow shapes') with `threads` BLAS threads on
// each rank of `group`, all multiplying the same shapes at once (lined up before each shape).
// A run's ranks multiply and then wait for the slowest. With a core each, that is the slowest
// core's rate (here one core ran the same multiply 2-3 % slower than the other, every time):
// each figure is the slowest rank's. Sharing cores, the scheduler hands a finished rank's
// share to the rest, and can leave one rank a core of its own for a whole measure while the
// others get less: the group's mean.
namespace {

constexpr std::size_t kNoWarmUpFrom = 1024;

// An `other`'s operands: allocated and filled once, every d multiplies on their leading parts.
struct Operands {
  std::size_t n, largest;
  arma::mat square_in, square_out, thin_in, thin_in2, thin_out;
  Operands(std::size_t n_, std::size_t largest_)
      : n(n_),
        largest(largest_),
        square_in(n, n, arma::fill::randu),
        square_out(n, n, arma::fill::zeros),
        thin_in(largest * n, 1, arma::fill::randu),
        thin_in2(largest * n, 1, arma::fill::randu),
        thin_out(largest * n, 1, arma::fill::zeros) {}
};

// A rows x cols matrix on the leading part of `buffer` (no copy; the product's size fixed).
arma::mat on(arma::mat& buffer, std::size_t rows, std::size_t cols) {
  return arma::mat(buffer.memptr(), rows, cols, false, true);
}

class GemmSweep {
 public:
  GemmSweep(int threads, const std::vector<std::size_t>& sizes, Communicator& group, bool own_cores,
            bool secondary);
  GemmModel run();

 private:
  // An entry's measures: rows and inner GFLOP/s.
  struct NarrowRaw {
    double rows, inner;
  };

  void sync() { group_.barrier(); }
  // The group's figure of a rank's rate: the slowest's, or the mean (own_cores_).
  double of_group(double rate) {
    if (own_cores_) return least_of_ranks(rate, group_);
    std::vector<double> x{rate};
    group_.allreduce_sum(x);
    return x[0] / group_.size();
  }
  void square(bool again);
  // The group's GFLOP/s of `call`, a multiply of `flops` (of_group: the slowest rank's, or the
  // mean).
  template <class F>
  double rate_of(const F& call, double flops) {
    sync();
    // No warm-up multiply: the operands are populated and BLAS is warm from the square sizes.
    return of_group(gflops_of(call, flops, 0.05, 2, false));
  }
  void narrow_sweep(Operands& o, std::size_t up_to, std::optional<std::size_t> first);
  void assemble();

  const std::vector<std::size_t>& sizes_;
  Communicator& group_;
  bool own_cores_, secondary_;
  GemmModel g_;
  std::vector<std::vector<double>> square_raw_;  // GFLOP/s of each size, per pass
  std::vector<std::vector<NarrowRaw>> narrow_raw_;
};

// The square sizes are measured twice, seconds apart (before and after the narrow shapes;
// beyond n = 1024 only those below 0.9 of the best rate), the mean of the two kept.
GemmSweep::GemmSweep(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool own_cores, bool secondary)
    : sizes_(sizes),
      group_(group),
      own_cores_(own_cores),
      secondary_(secondary),
      square_raw_(sizes.size()) {
  g_.threads = threads;
  set_blas_threads(threads);
}

// No warm-up call from n = 1024 on (BLAS warm from the smaller sizes, the operands written
// when they were made; the median of 3 calls passes over a slow first one): such a call
// takes most of a second with more ranks than cores.
void GemmSweep::square(bool again) {
  double best = 0;
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] >= 256 && !square_raw_[i].empty()) best = std::max(best, square_raw_[i][0]);
  }
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    const std::size_t n = sizes_[i];
    if (again && n > 1024 && square_raw_[i][0] >= 0.9 * best) continue;
    arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n);
    sync();
    square_raw_[i].push_back(of_group(multiply_gflops(a, b, c, 0.15, 3, n < kNoWarmUpFrom)));
  }
}

// The narrow shapes of `o` up to `up_to` rows: appended as entries (first pass), or measured
// again into the entries from `first` on.
void GemmSweep::narrow_sweep(Operands& o, std::size_t up_to, std::optional<std::size_t> first) {
  std::size_t index = first.value_or(0);
  for (std::size_t d = 4; d <= std::min(o.largest, up_to); d *= 2) {
    // As the runs multiply a few rows (rows_times_columns): C^T (n x d) = B^T A^T, B n x n,
    // A^T n x d, which runs slower than C (d x n) = A B.
    const double flops = 2.0 * static_cast<double>(d * o.n * o.n);
    const double rows = rate_of(
        [&] {
          gemm(true, false, o.n, d, o.n, o.square_in.memptr(), o.n, o.thin_in.memptr(), o.n,
               o.thin_out.memptr(), o.n);
        },
        flops);
    const arma::mat x = on(o.thin_in, o.n, d), y = on(o.thin_in2, d, o.n);
    arma::mat product = on(o.square_out, o.n, o.n);
    const double inner = rate_of([&] { product = x * y; }, flops);
    if (first) {
      narrow_raw_[index++].push_back({rows, inner});
    } else {
      g_.narrow.push_back({static_cast<double>(d), 0, 0, static_cast<double>(o.n)});
      narrow_raw_.push_back({{rows, inner}});
    }
  }
}

GemmModel GemmSweep::run() {
  square(false);
  // Narrow multiplies against the square curve: a few rows (or columns) of output, and a short
  // inner dimension, with the other two dimensions 1024, 2048 and, in a full calibration, 4096
  // (a 128 MiB operand, streamed from memory). Their GFLOP/s first, the ratios to the square
  // curve once its second pass is in. Each `other` fills its operands once, every d
  // multiplies on their leading parts (fresh ones per shape cost more than the multiplies).
  // A `secondary` curve (one the launch's own runs do not use) skips 2048, interpolated.
  std::vector<std::pair<std::size_t, std::size_t>> others;  // (other, largest dim)
  for (std::size_t n : {std::size_t{1024}, std::size_t{2048}, std::size_t{4096}}) {
    if (secondary_ && n == 2048 && sizes_.back() >= 2048) continue;
    if (n <= sizes_.back() || (n == 4096 && sizes_.back() >= 2048))
      others.emplace_back(n, n == 4096 ? 256 : n / 2);
  }
  if (others.empty()) others.emplace_back(sizes_.back(), sizes_.back() / 2);
  // A narrow multiply's 0.05 s is the sweep's noisiest figure: every `other`'s operands are
  // kept for a second pass after the square sizes' (up to 64 rows), each entry keeping the
  // mean of its passes. Not for a `secondary` curve.
  std::vector<std::pair<std::unique_ptr<Operands>, std::size_t>> kept;  // (operands, first)
  for (const auto& [n, largest] : others) {
    auto o = std::make_unique<Operands>(n, largest);
    const std::size_t first = g_.narrow.size();
    narrow_sweep(*o, largest, std::nullopt);
    if (!secondary_) kept.emplace_back(std::move(o), first);
  }
  // A `secondary` curve measures its square sizes once (the 90 s budget).
  if (!secondary_) square(true);
  for (auto& [o, first] : kept) narrow_sweep(*o, 64, first);
  kept.clear();
  assemble();
  return g_;
}

// The curve and the narrow shapes' ratios to it from the measures.
void GemmSweep::assemble() {
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    const double flops = 2.0 * static_cast<double>(sizes_[i]) * static_cast<double>(sizes_[i]) *
                         static_cast<double>(sizes_[i]);
    g_.curve.push_back({flops, std::accumulate(square_raw_[i].begin(), square_raw_[i].end(), 0.0) /
                                   static_cast<double>(square_raw_[i].size())});
  }
  // Both of an entry's multiplies (d x n x n and n x d x n) do 2 d n^2 flops.
  for (std::size_t i = 0; i < g_.narrow.size(); ++i) {
    GemmNarrow& e = g_.narrow[i];
    const double curve = g_.rate(2.0 * e.dim * e.other * e.other);
    std::vector<double> rows, inner;
    for (const NarrowRaw& r : narrow_raw_[i]) {
      rows.push_back(r.rows / curve);
      inner.push_back(r.inner / curve);
    }
    e.rows = median(rows);
    e.inner = median(inner);
  }
}

}  // namespace

GemmModel gemm_curve(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool own_cores, bool secondary) {
  return GemmSweep(threads, sizes, group, own_cores, secondary).run();
}

std::vector<double> of_every_rank(double mine, Communicator& comm) {
  std::vector<double> all(static_cast<std::size_t>(comm.size()));
  comm.allgatherv(std::vector<double>{mine}, all, std::vector<std::size_t>(all.size(), 1));
  return all;
}

double least_of_ranks(double mine, Communicator& comm) {
  const std::vector<double> all = of_every_rank(mine, comm);
  return *std::min_element(all.begin(), all.end());
}

Rounds multiply_rounds(Communicator& comm, std::size_t n, int rounds) {
  arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n);
  std::vector<double> means;
  for (int round = 0; round <= rounds; ++round) {
    comm.barrier();
    const auto start = Clock::now();
    c = a * b;
    const std::vector<double> all = of_every_rank(since(start), comm);
    const double mean =
        std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
    if (round > 0 && mean > 0) means.push_back(mean);
  }
  return {median_of(means), log_spread(means)};
}

}  // namespace distmm::calibration

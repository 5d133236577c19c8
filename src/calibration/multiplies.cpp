// Multiplies: the gemm curves, a first use's cost, rounds of a reference multiply.
#include <algorithm>
#include <armadillo>
#include <cmath>
#include <memory>
#include <optional>

#include "calibration/measure.hpp"
#include "distmm/blas.hpp"
#include "distmm/memory.hpp"
#include "local_multiply.hpp"

namespace distmm::calibration {

// GFLOP/s of c = a * b (gflops_of).
double multiply_gflops(const arma::mat& a, const arma::mat& b, arma::mat& c, double seconds,
                       std::size_t runs, bool warm_up) {
  const double flops = 2.0 * static_cast<double>(a.n_rows) * static_cast<double>(a.n_cols) *
                       static_cast<double>(b.n_cols);
  return gflops_of([&] { c = a * b; }, flops, seconds, runs, warm_up);
}

// GFLOP/s of n x n x n multiplies (and the narrow shapes') with `threads` BLAS threads on
// each rank of `group`, all multiplying the same shapes at once (lined up before each shape).
// Each figure is the mean over the group's ranks: with more ranks than cores the scheduler
// can leave one rank a core of its own for a whole measure (rank 0 read 39-44 GFLOP/s at
// n = 64 or 512 in two of five calibrations on 4 ranks and 2 cores, 20-22 elsewhere), while
// the others got less.
namespace {

constexpr std::size_t kNoWarmUpFrom = 1024;
constexpr double kPassesApart = 0.15;

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
  GemmSweep(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
            bool secondary);
  GemmModel run();

 private:
  struct Raw {
    double rate;
    std::size_t ref;
  };
  // An entry's measures (rows and inner GFLOP/s, and the reference beside them).
  struct NarrowRaw {
    double rows, inner;
    std::size_t ref;
  };

  void sync() { group_.barrier(); }
  // The group's mean of a rank's figure.
  double mean(double rate) {
    std::vector<double> x{rate};
    group_.allreduce_sum(x);
    return x[0] / group_.size();
  }
  std::size_t reference();
  void square(bool again);
  // The group's mean GFLOP/s of `call`, a multiply of `flops`.
  template <class F>
  double rate_of(const F& call, double flops) {
    sync();
    // No warm-up multiply (every page populated, BLAS warm from the square sizes): it had
    // taken a third of the narrow shapes' time (mpirun -np 4 calibrated in 47.9 s with it,
    // 40.4 and 43.8 s without).
    return mean(gflops_of(call, flops, 0.05, 2, false));
  }
  void narrow_sweep(Operands& o, std::size_t up_to, std::optional<std::size_t> first,
                    const std::vector<bool>& again = {});
  double scale(std::size_t ref) const { return drift_scale(refs_, ref); }
  void settle_apart(Operands& o, std::size_t first);
  void assemble();

  const std::vector<std::size_t>& sizes_;
  Communicator& group_;
  bool secondary_;
  GemmModel g_;
  std::size_t ref_n_;
  arma::mat ref_a_, ref_b_, ref_c_;
  double ref_flops_;
  std::vector<double> refs_;
  std::vector<std::vector<Raw>> square_raw_;
  std::vector<std::vector<NarrowRaw>> narrow_raw_;
};

// The machine's speed beside every measure: 512^3 multiplies for 10 ms right before it. This
// shared machine slows down for seconds at a time (three --ranks 2 calibrations in a row
// read 30.3, 36.5 and 39.1 GFLOP/s at n = 2048; one read 20.3 at n = 256 and 25.8 at 2048
// against 31.9 at 512, its predictions 35 % slow). Each figure is scaled by the median of
// all the references over the median of the five around its own: a slow patch slows the
// references beside it as much, and the curve keeps the machine's typical speed over the
// whole sweep. The square sizes are measured twice (before and after the narrow shapes,
// seconds apart; up to n = 1024, and the larger ones that came out below 0.9 of the best
// rate from n = 256 on), the mean of the two scaled figures kept.
GemmSweep::GemmSweep(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool secondary)
    : sizes_(sizes),
      group_(group),
      secondary_(secondary),
      ref_n_(std::min<std::size_t>(512, sizes.back())),
      ref_a_(ref_n_, ref_n_, arma::fill::randu),
      ref_b_(ref_n_, ref_n_, arma::fill::randu),
      ref_c_(ref_n_, ref_n_),
      ref_flops_(2.0 * std::pow(static_cast<double>(ref_n_), 3.0)),
      square_raw_(sizes.size()) {
  g_.threads = threads;
  set_blas_threads(threads);
}

// 512^3 multiplies for 10 ms: the machine's speed now. Returns its index.
std::size_t GemmSweep::reference() {
  sync();
  const auto start = Clock::now();
  double calls = 0;
  do {
    ref_c_ = ref_a_ * ref_b_;
    ++calls;
  } while (since(start) < 0.01);
  const double rate = calls * ref_flops_ / since(start) / 1e9;
  refs_.push_back(mean(rate));
  return refs_.size() - 1;
}

// No warm-up call from n = 1024 on (BLAS warm from the smaller sizes, every page of the
// operands and the product written when they were made; the median of 3 calls passes over a
// slow first one): at n = 2048 a call takes 0.8 s on each of 4 ranks sharing 2 cores (2
// hosts of 2 ranks at 200 Mbit/s: the square sizes' first pass 4.9 s with warm-up calls,
// 4.4-4.5 s without).
void GemmSweep::square(bool again) {
  double best = 0;
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] >= 256 && !square_raw_[i].empty()) best = std::max(best, square_raw_[i][0].rate);
  }
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    const std::size_t n = sizes_[i];
    if (again && n > 1024 && square_raw_[i][0].rate >= 0.9 * best) continue;
    arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n);
    const std::size_t ref = reference();
    sync();
    square_raw_[i].push_back({mean(multiply_gflops(a, b, c, 0.15, 3, n < kNoWarmUpFrom)), ref});
  }
}

// The narrow shapes of `o` up to `up_to` rows: appended as entries (first pass), or measured
// again into the entries from `first` on (those `again` names, all if it is empty).
void GemmSweep::narrow_sweep(Operands& o, std::size_t up_to, std::optional<std::size_t> first,
                             const std::vector<bool>& again) {
  std::size_t index = first.value_or(0);
  for (std::size_t d = 4; d <= std::min(o.largest, up_to); d *= 2) {
    if (first && !again.empty() && !again[index]) {
      ++index;
      continue;
    }
    const std::size_t ref = reference();
    // As the runs multiply a few rows (dp's, fsdp's, hsdp's, tp-col's: rows_times_columns):
    // C^T (n x d) = B^T A^T, B n x n and A^T n x d. 4 ranks on 2 cores, d = 16, n = 4096:
    // 10.3-11.4 GFLOP/s a rank, against 12.1-12.7 as C (d x n) = A B; dp's 64 x 4096 x 4096
    // multiplied at 11.3 and was predicted 13.1 from the latter.
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
      narrow_raw_[index++].push_back({rows, inner, ref});
    } else {
      g_.narrow.push_back({static_cast<double>(d), 0, 0, static_cast<double>(o.n)});
      narrow_raw_.push_back({{rows, inner, ref}});
    }
  }
}

// The third pass only for the entries whose passes differ (where every entry of an `other`
// was measured again once one of them differed, it took 3.3 s of a calibration on 2 hosts
// of 2 ranks at 200 Mbit/s).
void GemmSweep::settle_apart(Operands& o, std::size_t first) {
  std::vector<bool> apart(narrow_raw_.size(), false);
  for (std::size_t i = first;
       i < g_.narrow.size() && g_.narrow[i].other == static_cast<double>(o.n); ++i) {
    const auto& raws = narrow_raw_[i];
    if (raws.size() < 2) continue;
    const auto differ = [&](double NarrowRaw::*field) {
      const double a = raws[0].*field * scale(raws[0].ref), b = raws[1].*field * scale(raws[1].ref);
      return std::abs(a - b) > kPassesApart * std::max(a, b);
    };
    apart[i] = differ(&NarrowRaw::rows) || differ(&NarrowRaw::inner);
  }
  // Every rank decides alike: the figures are means over the group's ranks.
  if (std::find(apart.begin(), apart.end(), true) != apart.end()) {
    narrow_sweep(o, 64, first, apart);
  }
}

GemmModel GemmSweep::run() {
  square(false);
  // Narrow multiplies against the square curve: a few rows (or columns) of output, and a short
  // inner dimension, with the other two dimensions 1024 and the largest square measured (at
  // most 2048), and, in a full calibration, 4096 (a 128 MiB operand: streamed from memory).
  // Two timed calls each at least: the widest (1024 by 2048 by 2048) take a tenth of a
  // second each, a third of them several seconds of a calibration. Their GFLOP/s first, the
  // ratios to the square curve once its second pass is in. Each `other` allocates and fills
  // its operands once, every d multiplies on their leading parts: fresh operands for each
  // shape (128 MiB at n = 4096, faulted in at 12-18 us a page and filled) had taken 0.6 s of
  // a 4-rank calibration for each d at 4096, as long as its d = 4 multiplies 60 times over.
  // A `secondary` curve (one the launch's own runs do not use) skips the middle `other`, 2048
  // (interpolated between 1024 and 4096): 2 hosts of 2 ranks at 200 Mbit/s, the gemm phase
  // took 44.8 s with it, 32.3 s without (one calibration each).
  std::vector<std::pair<std::size_t, std::size_t>> others;  // (other, largest dim)
  for (std::size_t n : {std::size_t{1024}, std::size_t{2048}, std::size_t{4096}}) {
    if (secondary_ && n == 2048 && sizes_.back() >= 2048) continue;
    if (n <= sizes_.back() || (n == 4096 && sizes_.back() >= 2048))
      others.emplace_back(n, n == 4096 ? 256 : n / 2);
  }
  if (others.empty()) others.emplace_back(sizes_.back(), sizes_.back() / 2);
  // Every `other`'s operands are kept for a second pass after the square sizes' (up to 64
  // rows: the 128 and 256-row ones at 4096 take most of the sweep's time): a narrow multiply's
  // 0.05 s is the noisiest figure of the sweep, both ways (the 32-row one at 4096 read
  // 0.41-0.84 of the curve in 18 calibrations; one --ranks 2 calibration's 0.41 and 0.50 at 32
  // and 64 rows predicted 64 x 4096 x 4096 +14-40 % in every strategy; one mpirun -np 4
  // calibration's 0.78 at 16 rows, where three others read 0.48-0.59 and the rank's multiply
  // runs at 0.53 in distmm, predicted its dp and fsdp -30 to -36 %). Where an entry's two
  // passes differ by more than kPassesApart a third pass settles it; each entry keeps the median
  // of its passes. Neither for a `secondary` curve.
  std::vector<std::pair<std::unique_ptr<Operands>, std::size_t>> kept;  // (operands, first)
  for (const auto& [n, largest] : others) {
    auto o = std::make_unique<Operands>(n, largest);
    const std::size_t first = g_.narrow.size();
    narrow_sweep(*o, largest, std::nullopt);
    if (!secondary_) kept.emplace_back(std::move(o), first);
  }
  // A `secondary` curve measures its square sizes once: its second pass took 3.5 s of a
  // calibration on 2 hosts of 2 ranks at 200 Mbit/s (the curve for 2 threads, one rank per
  // host, which that launch's runs do not use), whose target is 90 s.
  if (!secondary_) square(true);
  for (auto& [o, first] : kept) narrow_sweep(*o, 64, first);
  for (auto& [o, first] : kept) settle_apart(*o, first);
  kept.clear();
  assemble();
  return g_;
}

// The curve and the narrow shapes' ratios to it from the scaled measures.
void GemmSweep::assemble() {
  // A scaled figure above every measured one is the references' noise, not the machine's
  // speed: the curve of one rank with 2 threads under mpirun -np 4 read 51-61 GFLOP/s from
  // n = 256 to 1024 and 112 at n = 2048 (2 cores run about 70 at most; two other
  // calibrations read 64 and 57 there).
  double fastest = 0;
  for (const auto& raws : square_raw_) {
    for (const Raw& r : raws) fastest = std::max(fastest, r.rate);
  }
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    double sum = 0;
    for (const Raw& r : square_raw_[i]) sum += r.rate * scale(r.ref);
    const double flops = 2.0 * static_cast<double>(sizes_[i]) * static_cast<double>(sizes_[i]) *
                         static_cast<double>(sizes_[i]);
    g_.curve.push_back(
        {flops, std::min(fastest, sum / static_cast<double>(square_raw_[i].size()))});
  }
  // Both of an entry's multiplies (d x n x n and n x d x n) do 2 d n^2 flops.
  for (std::size_t i = 0; i < g_.narrow.size(); ++i) {
    GemmNarrow& e = g_.narrow[i];
    const double curve = g_.rate(2.0 * e.dim * e.other * e.other);
    std::vector<double> rows, inner;
    for (const NarrowRaw& r : narrow_raw_[i]) {
      rows.push_back(r.rows * scale(r.ref) / curve);
      inner.push_back(r.inner * scale(r.ref) / curve);
    }
    e.rows = median(rows);
    e.inner = median(inner);
  }
  raise_narrow_dips(g_);
}

}  // namespace

GemmModel gemm_curve(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool secondary) {
  return GemmSweep(threads, sizes, group, secondary).run();
}

// How much longer c = a * b takes the first time than the second (a and b filled first).
// With `line_up`, its ranks line up before each multiply (every one of them calls this): one
// rank's multiply timed while another still populates its pages (kernel time on a shared
// core) had read as a first-use cost (3.6 us per page in a --ranks 4 calibration, 0-0.05 in
// others; its cold predictions came out 40-110 % too slow).
double first_multiply_extra_s(arma::mat& a, arma::mat& b, arma::mat& c, Communicator* line_up) {
  a.fill(1.0);
  b.fill(2.0);
  double t[2];
  for (double& x : t) {
    if (line_up != nullptr) line_up->barrier();
    const auto start = Clock::now();
    c = a * b;
    x = since(start);
  }
  return std::max(0.0, t[0] - t[1]);
}

// Every rank's figure, in rank order (every rank gets them).
std::vector<double> of_every_rank(double mine, Communicator& comm) {
  std::vector<double> all(static_cast<std::size_t>(comm.size()));
  comm.allgatherv(std::vector<double>{mine}, all, std::vector<std::size_t>(all.size(), 1));
  return all;
}

// The least of the ranks' figures (every rank gets it).
double least_of_ranks(double mine, Communicator& comm) {
  const std::vector<double> all = of_every_rank(mine, comm);
  return *std::min_element(all.begin(), all.end());
}

// Rounds of the same n^3 multiply on every rank, all started together, after one unmeasured;
// each rank with the BLAS threads it has now.
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

// What a multiply costs more, per 4 KiB page of its operands, the first time it runs on
// freshly allocated (populated) matrices: n x n x n, cold then warm, every rank at once;
// per rank the median of three trials, then the least of the ranks' figures. With 4 ranks on 2
// cores a cold-minus-warm difference is mostly the scheduler's: rank 0's median alone read 1.45
// and 2.93 us per page in two calibrations of 2 namespace hosts x 2 ranks (0-0.05 with 2 ranks),
// and those runs' cold executions showed none of it (32 x 2048 x 2048 dp at 200 Mbit/s: 28.5 ms
// cold, 30.7 warm; predicted 60 cold).
double gemm_first_use_per_page(std::size_t n, Communicator& comm) {
  std::vector<double> extra;
  for (int trial = 0; trial < 3; ++trial) {
    // Straight from the kernel, populated, as a new process's plans get their memory.
    const FreshPages pa(n * n), pb(n * n), pc(n * n);
    arma::mat a(pa.span().data(), n, n, false, true), b(pb.span().data(), n, n, false, true),
        c(pc.span().data(), n, n, false, true);
    extra.push_back(first_multiply_extra_s(a, b, c, &comm));
  }
  return least_of_ranks(median_of(extra), comm) /
         (3.0 * static_cast<double>(n * n * sizeof(double)) / 4096.0);
}

}  // namespace distmm::calibration

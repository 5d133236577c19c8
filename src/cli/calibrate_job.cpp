#include "cli/calibrate_job.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <armadillo>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/job_common.hpp"
#include "cli/run_record.hpp"
#include "distmm/blas.hpp"
#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/memory.hpp"
#include "distmm/model.hpp"
#include "distmm/report.hpp"
#include "distmm/sharding.hpp"
#include "distmm/stats.hpp"
#include "local_multiply.hpp"
#include "sim/columns.hpp"
#include "strategies/helper_thread.hpp"

namespace distmm::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The expected time of calls across hosts whose exchanges take one of two times at random:
// the mean of the calls, each counted at most twice the fastest (an exchange that runs one
// way after the other doubles at most; more is a stall of the link, not the call's cost).
double expected_of(const std::vector<double>& v) {
  const double fastest = *std::min_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += std::min(x, 2 * fastest);
  return sum / static_cast<double>(v.size());
}

// Hands the memory the C library kept from freed buffers back to the kernel. Under a
// sanitizer the allocator is the sanitizer's own and glibc's heap was never set up, so its
// malloc_trim() would crash: nothing to hand back there.
void release_freed_memory() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  malloc_trim(0);
#endif
}

// Memory straight from the kernel (not what the C library kept from earlier buffers),
// populated as plans populate theirs: what a cold run's buffers are.
class FreshPages {
 public:
  explicit FreshPages(std::size_t count) : count_(count) {
    if (count_ == 0) return;
    void* p = mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<double*>(p);
    prefault(data_, bytes());
    std::fill(data_, data_ + count_, 1.0);
  }
  FreshPages(const FreshPages&) = delete;
  FreshPages& operator=(const FreshPages&) = delete;
  ~FreshPages() {
    if (data_ != nullptr) munmap(data_, bytes());
  }
  std::span<double> span() const { return {data_, count_}; }

 private:
  std::size_t bytes() const { return count_ * sizeof(double); }
  std::size_t count_;
  double* data_ = nullptr;
};

// One-way time of a message of `bytes` between ranks a and b (half a round trip), the median
// of several batches. Every rank calls it (with the same `expected_s`, the one-way time the
// caller expects, 0 if none); ranks other than a and b only wait.
double ping_pong(Communicator& comm, int a, int b, std::size_t bytes, std::vector<double>& buf,
                 double expected_s = 0, int batch_count = 5) {
  const int me = comm.rank();
  const std::size_t count = bytes / sizeof(double);
  const std::span<double> data(buf.data(), count);
  // About 4 MB moved per batch (one round trip at least): precise small sizes, and a slow
  // link's large ones in seconds, not minutes; and a batch of about 0.1 s at most where the
  // expected time says so (at 200 Mbit/s 4 MB each way took 0.33 s, 5 batches of each size
  // from 32 KiB up most of the 13 s the sweep took).
  double most = 4e6 / (static_cast<double>(bytes) + 1e3);
  if (expected_s > 0) most = std::min(most, 0.1 / (2 * expected_s));
  const int rounds = static_cast<int>(std::clamp(most, 1.0, 200.0));
  std::vector<double> batches;
  for (int batch = 0; batch < batch_count; ++batch) {
    comm.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < rounds; ++i) {
      if (me == a) {
        comm.send(data, b, 7);
        comm.recv(data, b, 7);
      } else if (me == b) {
        comm.recv(data, a, 7);
        comm.send(data, a, 7);
      }
    }
    batches.push_back(since(start) / (2.0 * rounds));
  }
  std::vector<double> t{me == a ? median_of(batches) : 0.0};
  comm.broadcast(t, a);
  return t[0];
}

// What a buffer's first use for communication costs more, per 4 KiB page: a round trip of
// `bytes` between ranks a and b on fresh (locally written) buffers, then again on the same
// ones; the first message used two buffers (a's and b's) for the first time.
double first_use_per_page(Communicator& comm, int a, int b, std::size_t bytes) {
  const int me = comm.rank();
  std::vector<double> times;
  for (int trial = 0; trial < 3; ++trial) {
    // Populated as plans populate their buffers, on pages new to the process: from the heap
    // (fresh_matrix) these had been the earlier sweeps' freed buffers (freed memory is kept),
    // used for communication already. Under mpirun -np 4 that read 0.08 us a page, where a
    // 32 MiB ping-pong on new pages reads 4.5-5.0 (and -np 2 5.0), and fsdp-overlap
    // 64 x 4096 x 4096's cold ring steps, each into a new 32 MiB buffer, took 100 ms more.
    const FreshPages pages(me == a || me == b ? bytes / sizeof(double) : 0);
    const std::span<double> fresh = pages.span();
    double round[2] = {0, 0};
    for (double& t : round) {
      comm.barrier();
      const auto start = Clock::now();
      if (me == a) {
        comm.send(fresh, b, 8);
        comm.recv(fresh, b, 8);
      } else if (me == b) {
        comm.recv(fresh, a, 8);
        comm.send(fresh, a, 8);
      }
      t = since(start);
    }
    times.push_back(std::max(0.0, round[0] - round[1]));
  }
  std::vector<double> t{me == a ? median_of(times) / (2.0 * static_cast<double>(bytes) / 4096.0)
                                : 0.0};
  comm.broadcast(t, a);
  return t[0];
}

// GFLOP/s of `call` (a multiply of `flops`): the median over batches of repeated calls, each
// batch at least kBatch_s long, for at least `seconds` (and at least `runs` batches), after one
// call that warms BLAS's buffers and the pages (unless `warm_up` is false: operands already in
// use and BLAS warm; with 2 batches the faster counts, so a cold first one is passed over).
// Batches, not single calls: with more ranks than cores a call shorter than the scheduler's slice
// mostly runs on a core of its own, so the median call (4 ranks on 2 cores: 39 GFLOP/s at n =
// 256) measured a core alone, while a rank gets its share (18 GFLOP/s over 20 ms batches, as at
// n = 512, where calls outlast a slice).
template <typename F>
double gflops_of(F&& call, double flops, double seconds, std::size_t runs = 3,
                 bool warm_up = true) {
  constexpr double kBatch_s = 0.02;
  if (warm_up) call();
  std::vector<double> rates;
  const auto start = Clock::now();
  do {
    const auto t = Clock::now();
    double calls = 0;
    do {
      call();
      ++calls;
    } while (since(t) < kBatch_s);
    rates.push_back(calls * flops / since(t) / 1e9);
  } while (since(start) < seconds || rates.size() < runs);
  // The last batch may have run after the other ranks finished theirs, with the cores to
  // itself (4 ranks on 2 cores, n = 1024 in one-call batches: 24-46 GFLOP/s against 21 at
  // n = 512 and 2048): dropped when there are more than `runs` (then the median of `runs`
  // batches, at least 3 of them, passes it over).
  if (rates.size() > runs) rates.pop_back();
  return median_of(rates);
}

// GFLOP/s of c = a * b (gflops_of).
double multiply_gflops(const arma::mat& a, const arma::mat& b, arma::mat& c, double seconds,
                       std::size_t runs = 3, bool warm_up = true) {
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
GemmModel gemm_curve(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool secondary = false) {
  const auto sync = [&] { group.barrier(); };
  const auto mean = [&](double rate) {
    std::vector<double> x{rate};
    group.allreduce_sum(x);
    return x[0] / group.size();
  };
  GemmModel g;
  g.threads = threads;
  set_blas_threads(threads);
  // The machine's speed beside every measure: 512^3 multiplies for 10 ms right before it. This
  // shared machine slows down for seconds at a time (three --ranks 2 calibrations in a row
  // read 30.3, 36.5 and 39.1 GFLOP/s at n = 2048; one read 20.3 at n = 256 and 25.8 at 2048
  // against 31.9 at 512, its predictions 35 % slow). Each figure is scaled by the median of
  // all the references over the median of the five around its own: a slow patch slows the
  // references beside it as much, and the curve keeps the machine's typical speed over the
  // whole sweep. The square sizes are measured twice (before and after the narrow shapes,
  // seconds apart; up to n = 1024, and the larger ones that came out below 0.9 of the best
  // rate from n = 256 on), the mean of the two scaled figures kept.
  const std::size_t ref_n = std::min<std::size_t>(512, sizes.back());
  arma::mat ref_a(ref_n, ref_n, arma::fill::randu), ref_b(ref_n, ref_n, arma::fill::randu),
      ref_c(ref_n, ref_n);
  std::vector<double> refs;
  const double ref_flops = 2.0 * std::pow(static_cast<double>(ref_n), 3.0);
  const auto reference = [&] {
    sync();
    const auto start = Clock::now();
    double calls = 0;
    do {
      ref_c = ref_a * ref_b;
      ++calls;
    } while (since(start) < 0.01);
    const double rate = calls * ref_flops / since(start) / 1e9;
    refs.push_back(mean(rate));
    return refs.size() - 1;
  };
  struct Raw {
    double rate;
    std::size_t ref;
  };
  std::vector<std::vector<Raw>> square_raw(sizes.size());
  // No warm-up call from n = 1024 on (BLAS warm from the smaller sizes, every page of the
  // operands and the product written when they were made; the median of 3 calls passes over a
  // slow first one): at n = 2048 a call takes 0.8 s on each of 4 ranks sharing 2 cores (2
  // hosts of 2 ranks at 200 Mbit/s: the square sizes' first pass 4.9 s with warm-up calls,
  // 4.4-4.5 s without).
  constexpr std::size_t kNoWarmUpFrom = 1024;
  const auto square = [&](bool again) {
    double best = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] >= 256 && !square_raw[i].empty()) best = std::max(best, square_raw[i][0].rate);
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::size_t n = sizes[i];
      if (again && n > 1024 && square_raw[i][0].rate >= 0.9 * best) continue;
      arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n);
      const std::size_t ref = reference();
      sync();
      square_raw[i].push_back({mean(multiply_gflops(a, b, c, 0.15, 3, n < kNoWarmUpFrom)), ref});
    }
  };
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
    if (secondary && n == 2048 && sizes.back() >= 2048) continue;
    if (n <= sizes.back() || (n == 4096 && sizes.back() >= 2048))
      others.emplace_back(n, n == 4096 ? 256 : n / 2);
  }
  if (others.empty()) others.emplace_back(sizes.back(), sizes.back() / 2);
  // Each entry's measures (rows and inner GFLOP/s, and the reference beside them).
  struct NarrowRaw {
    double rows, inner;
    std::size_t ref;
  };
  std::vector<std::vector<NarrowRaw>> narrow_raw;
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
  const auto on = [](arma::mat& buffer, std::size_t rows, std::size_t cols) {
    return arma::mat(buffer.memptr(), rows, cols, false, true);
  };
  // The group's mean GFLOP/s of `call`, a multiply of `flops`.
  const auto rate_of = [&](const auto& call, double flops) {
    sync();
    // No warm-up multiply (every page populated, BLAS warm from the square sizes): it had
    // taken a third of the narrow shapes' time (mpirun -np 4 calibrated in 47.9 s with it,
    // 40.4 and 43.8 s without).
    return mean(gflops_of(call, flops, 0.05, 2, false));
  };
  // The narrow shapes of `o` up to `up_to` rows: appended as entries (first pass), or measured
  // again into the entries from `first` on (those `again` names, all if it is empty).
  const auto narrow_sweep = [&](Operands& o, std::size_t up_to, std::optional<std::size_t> first,
                                const std::vector<bool>& again = {}) {
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
        narrow_raw[index++].push_back({rows, inner, ref});
      } else {
        g.narrow.push_back({static_cast<double>(d), 0, 0, static_cast<double>(o.n)});
        narrow_raw.push_back({{rows, inner, ref}});
      }
    }
  };
  // Every `other`'s operands are kept for a second pass after the square sizes' (up to 64
  // rows: the 128 and 256-row ones at 4096 take most of the sweep's time): a narrow multiply's
  // 0.05 s is the noisiest figure of the sweep, both ways (the 32-row one at 4096 read
  // 0.41-0.84 of the curve in 18 calibrations; one --ranks 2 calibration's 0.41 and 0.50 at 32
  // and 64 rows predicted 64 x 4096 x 4096 +14-40 % in every strategy; one mpirun -np 4
  // calibration's 0.78 at 16 rows, where three others read 0.48-0.59 and the rank's multiply
  // runs at 0.53 in distmm, predicted its dp and fsdp -30 to -36 %). Where an entry's two
  // passes differ by more than kPassesApart a third pass settles it; each entry keeps the median
  // of its passes. Neither for a `secondary` curve.
  constexpr double kPassesApart = 0.15;
  std::vector<std::pair<std::unique_ptr<Operands>, std::size_t>> kept;  // (operands, first)
  for (const auto& [n, largest] : others) {
    auto o = std::make_unique<Operands>(n, largest);
    const std::size_t first = g.narrow.size();
    narrow_sweep(*o, largest, std::nullopt);
    if (!secondary) kept.emplace_back(std::move(o), first);
  }
  // A `secondary` curve measures its square sizes once: its second pass took 3.5 s of a
  // calibration on 2 hosts of 2 ranks at 200 Mbit/s (the curve for 2 threads, one rank per
  // host, which that launch's runs do not use), whose target is 90 s.
  if (!secondary) square(true);
  for (auto& [o, first] : kept) narrow_sweep(*o, 64, first);
  const auto scale = [&](std::size_t ref) { return drift_scale(refs, ref); };
  // The third pass only for the entries whose passes differ (where every entry of an `other`
  // was measured again once one of them differed, it took 3.3 s of a calibration on 2 hosts
  // of 2 ranks at 200 Mbit/s).
  for (auto& [o, first] : kept) {
    std::vector<bool> apart(narrow_raw.size(), false);
    for (std::size_t i = first;
         i < g.narrow.size() && g.narrow[i].other == static_cast<double>(o->n); ++i) {
      const auto& raws = narrow_raw[i];
      if (raws.size() < 2) continue;
      const auto differ = [&](double NarrowRaw::*field) {
        const double a = raws[0].*field * scale(raws[0].ref),
                     b = raws[1].*field * scale(raws[1].ref);
        return std::abs(a - b) > kPassesApart * std::max(a, b);
      };
      apart[i] = differ(&NarrowRaw::rows) || differ(&NarrowRaw::inner);
    }
    // Every rank decides alike: the figures are means over the group's ranks.
    if (std::find(apart.begin(), apart.end(), true) != apart.end())
      narrow_sweep(*o, 64, first, apart);
  }
  kept.clear();
  // A scaled figure above every measured one is the references' noise, not the machine's
  // speed: the curve of one rank with 2 threads under mpirun -np 4 read 51-61 GFLOP/s from
  // n = 256 to 1024 and 112 at n = 2048 (2 cores run about 70 at most; two other
  // calibrations read 64 and 57 there).
  double fastest = 0;
  for (const auto& raws : square_raw) {
    for (const Raw& r : raws) fastest = std::max(fastest, r.rate);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    double sum = 0;
    for (const Raw& r : square_raw[i]) sum += r.rate * scale(r.ref);
    const double flops = 2.0 * static_cast<double>(sizes[i]) * static_cast<double>(sizes[i]) *
                         static_cast<double>(sizes[i]);
    g.curve.push_back({flops, std::min(fastest, sum / static_cast<double>(square_raw[i].size()))});
  }
  // Both of an entry's multiplies (d x n x n and n x d x n) do 2 d n^2 flops.
  for (std::size_t i = 0; i < g.narrow.size(); ++i) {
    GemmNarrow& e = g.narrow[i];
    const double curve = g.rate(2.0 * e.dim * e.other * e.other);
    std::vector<double> rows, inner;
    for (const NarrowRaw& r : narrow_raw[i]) {
      rows.push_back(r.rows * scale(r.ref) / curve);
      inner.push_back(r.inner * scale(r.ref) / curve);
    }
    e.rows = median(rows);
    e.inner = median(inner);
  }
  raise_narrow_dips(g);
  return g;
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

struct Stragglers {
  double excess = 0;  // the median over rounds of (slowest / mean - 1)
  double mean_s = 0;  // the median over rounds of the ranks' mean time
};

// How much longer than their mean the slowest of the ranks takes over the same n^3 multiply,
// all started together (a barrier before each): the median over `rounds` of (slowest /
// mean - 1), after one such round unmeasured. Each rank with the BLAS threads it has now.
Stragglers stragglers(Communicator& comm, std::size_t n, int rounds) {
  arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n);
  std::vector<double> excess, means;
  for (int round = 0; round <= rounds; ++round) {
    comm.barrier();
    const auto start = Clock::now();
    c = a * b;
    const std::vector<double> all = of_every_rank(since(start), comm);
    const double mean =
        std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
    if (round > 0 && mean > 0) {
      excess.push_back(*std::max_element(all.begin(), all.end()) / mean - 1);
      means.push_back(mean);
    }
  }
  return {comm.size() < 2 ? 0.0 : median_of(excess), median_of(means)};
}

// What the process's first multiply costs more than the next (the BLAS library sets up its
// buffers): 1024^3 on populated matrices, twice, the ranks one after another while the
// others wait, the least of the ranks' figures. All at once, with more ranks than cores, the
// difference was the scheduler's: `--ranks 4` calibrations read 0, 0, 0.008 and 0.055 s
// (the last predicted that validation run's cold simulator executions 58-183 % too slow:
// their first multiplies took 4 ms longer than the next), `mpirun -np 4` 0 and 0.012 s; and
// before the simulator bound its rank threads one rank's figure ranged 0.002-0.080 s. Must
// run before any other multiply.
double gemm_first_call_s(Communicator& comm) {
  const std::size_t n = 1024;
  arma::mat a = fresh_matrix<double>(n, n), b = fresh_matrix<double>(n, n),
            c = fresh_matrix<double>(n, n);
  double extra = 0;
  for (int turn = 0; turn < comm.size(); ++turn) {
    comm.barrier();
    if (comm.rank() == turn) extra = first_multiply_extra_s(a, b, c, nullptr);
  }
  return least_of_ranks(extra, comm);
}

// What a multiply costs more, per 4 KiB page of its operands, the first time it runs on
// freshly allocated (populated) matrices: n x n x n, cold then warm, every rank at once;
// per rank the median of three trials, then the least of the ranks' figures (as for the
// first call). With 4 ranks on 2 cores a cold-minus-warm difference is mostly the
// scheduler's: rank 0's median alone read 1.45 and 2.93 us per page in two calibrations
// of 2 namespace hosts x 2 ranks (0-0.05 with 2 ranks), and those runs' cold executions
// showed none of it (32 x 2048 x 2048 dp at 200 Mbit/s: 28.5 ms cold, 30.7 warm; predicted
// 60 cold).
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

// What the first use of a page populated earlier costs once the process has populated other
// memory since, per 4 KiB page: a run's setup populates each rank's buffers, then more
// (the plan's next buffers; in the simulator every rank's, one process), and its cold
// execution uses them again. On this kind of virtual machine that use costs (host
// translations dropped: not a page fault the guest sees): dp 8192 x 256 x 8192 with
// --ranks 2, rank 1's first multiply took 0.48-0.66 s against 0.33 warm, its 280 MiB of
// buffers populated at setup; within one process only (populating 1 GiB in another process
// left the first buffer's next use at 0.05 us a page, 1.7-4.6 in the same one). Every rank at
// once, as a run's setup. A trial reads either about 0.05 us a page or 2-6 (one calibration's 8:
// 0.04, 0.05, 0.10, 0.10, 0.11, 3.2, 4.3, 5.7), so the mean over every trial of every rank. Timed
// on the thread's CPU clock: ranks that share a core count their own.
double revisit_per_page(Communicator& comm, std::size_t bytes, int trials) {
  const auto cpu_s = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const auto touch = [&](std::span<double> data) {
    const double start = cpu_s();
    volatile double* v = data.data();
    for (std::size_t i = 0; i < data.size(); i += 4096 / sizeof(double)) v[i] = v[i] + 1;
    return cpu_s() - start;
  };
  const std::size_t count = bytes / sizeof(double);
  double sum = 0;
  for (int trial = 0; trial < trials; ++trial) {
    // From the C library's heap, as plans allocate theirs (mapped blocks of their own read
    // less: 0.03 us a page in two calibrations of 12 trials), handed back to the kernel first
    // so that every page is new.
    release_freed_memory();
    arma::mat used = fresh_matrix<double>(count, 1);
    comm.barrier();
    const arma::mat later = fresh_matrix<double>(4 * count, 1);
    comm.barrier();
    const std::span<double> pages(used.memptr(), count);
    const double first = touch(pages);
    sum += std::max(0.0, first - touch(pages));
  }
  const std::vector<double> all = of_every_rank(sum / trials, comm);
  return std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size()) /
         (static_cast<double>(bytes) / 4096.0);
}

// Fresh memory costs more per page once a host holds more than a pool of it (a virtual
// machine's host backs the first so much quickly: on these machines one process populating
// 3 GiB took 10 us a page up to 1.3-1.8 GiB, 15-18 beyond; two at once, 1.3 GiB between
// them). Every rank of each host populates its share of 64 MiB of the host's a step, all
// hosts at once (hosts that share a machine share its pool), until a step and the two after
// it take 1.3 times the first three steps' median, or `cap_bytes` a host, or `budget_s` of
// steps (calibrate's 90 s: across 2 hosts of 2 ranks it took 88-90 s with 3-4 s of this
// sweep, 81.6 before it, the machine 10 % slower than then). The pool: the
// host's bytes before that step (0: none found). What a page beyond it costs more: the
// difference of those three steps' median and the first three's, per page of the host's
// step. The more is not the guest's CPU work (it did not divide among the cores): 4 ranks
// on 2 cores read 5.3 and 6.6 us a page more that way (13.2 counted per core), and one process
// populating 512 MiB while three others waited on it (Open MPI's reduce, below) took 6.7-6.9
// us a page more than at 64 MiB.
struct FreshPool {
  double pool_bytes = 0;
  double more_s_per_page = 0;
};

FreshPool fresh_pool(Communicator& comm, int ranks_per_host, std::size_t cap_bytes,
                     double budget_s) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t host_step = std::size_t{64} << 20;
  const std::size_t mine = host_step / static_cast<std::size_t>(ranks_per_host) / page * page;
  const std::size_t steps_at_most = cap_bytes / host_step;
  void* p = mmap(nullptr, mine * steps_at_most, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  const bool mapped = p != MAP_FAILED;
  auto* c = static_cast<volatile unsigned char*>(mapped ? p : nullptr);
  std::vector<double> steps;
  double spent = 0;
  FreshPool out;
  const auto median3 = [&](std::size_t from) {
    std::vector<double> v(steps.begin() + static_cast<std::ptrdiff_t>(from),
                          steps.begin() + static_cast<std::ptrdiff_t>(from + 3));
    return median_of(v);
  };
  for (std::size_t i = 0; i < steps_at_most; ++i) {
    comm.barrier();
    const auto start = Clock::now();
    if (mapped) {
      for (std::size_t b = i * mine; b < (i + 1) * mine; b += page) c[b] = 1;
    }
    // Every rank decides alike from every rank's time (a failed mapping reads 0: no pool).
    const std::vector<double> all = of_every_rank(mapped ? since(start) : 0.0, comm);
    steps.push_back(*std::max_element(all.begin(), all.end()));
    spent += steps.back();
    if (steps.back() <= 0) break;
    if (steps.size() < 6) continue;
    const double base = median3(0);
    const std::size_t k = steps.size() - 3;
    if (steps[k] > 1.3 * base && median3(k) > 1.3 * base) {
      out.pool_bytes = static_cast<double>(k * host_step);
      out.more_s_per_page = (median3(k) - base) / (static_cast<double>(host_step) / 4096.0);
      break;
    }
    if (spent > budget_s) break;
  }
  if (mapped) munmap(p, mine * steps_at_most);
  return out;
}

double first_touch_per_page(std::size_t bytes) {
  const long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  auto* c = static_cast<volatile unsigned char*>(p);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < bytes; i += static_cast<std::size_t>(page)) c[i] = 1;
  const double s = since(start);
  munmap(p, bytes);
  // Per 4 KiB page, whatever the kernel's page size.
  return s / (static_cast<double>(bytes) / 4096.0);
}

// Bytes per second of copying a block of columns between a row-major matrix of rows x width
// and a column-major block, the mean of both directions (a scatter's root packs, a gather's
// unpacks). Open MPI's column datatype goes down each column, one element a row: copied here
// in that order, at the root. The simulator's members copy their own by tiles
// (sim/columns.hpp): timed as it runs.
double strided_copy_Bps(std::size_t rows, std::size_t width, bool simulator) {
  const std::size_t cols = width / 2;
  std::vector<double> matrix(rows * width, 1.0), block(rows * cols, 0.0);
  const RowMajor layout{rows, width};
  std::vector<double> rates;
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    if (simulator) {
      sim::columns_between(layout, 0, block.size(), matrix.data(), block.data(), true);
      sim::columns_between(layout, 0, block.size(), block.data(), matrix.data(), false);
    } else {
      for (std::size_t c = 0; c < cols; ++c) {
        for (std::size_t r = 0; r < rows; ++r) block[c * rows + r] = matrix[r * width + c];
      }
      for (std::size_t c = 0; c < cols; ++c) {
        for (std::size_t r = 0; r < rows; ++r) matrix[r * width + c] = block[c * rows + r] + 1;
      }
    }
    rates.push_back(static_cast<double>(block.size() * sizeof(double)) * 2 / since(t));
  }
  if (block[rows] < 0) rates.push_back(0);  // keeps the copies observable
  return median_of(rates);
}

// strided_copy_Bps by the length of the matrix's rows (MachineModel::strided_copy): rows of
// 512 to 8192 doubles (4-64 KiB) and of lengths that are not multiples of 4 KiB, matrices of
// about `bytes` each.
std::vector<StridedCopyPoint> strided_copy_points(std::size_t bytes, bool simulator) {
  std::vector<StridedCopyPoint> points;
  for (const std::size_t width :
       std::initializer_list<std::size_t>{512, 700, 1024, 1500, 2048, 3000, 4096, 6000, 8192}) {
    const std::size_t rows = std::max<std::size_t>(1, bytes / sizeof(double) / width);
    points.push_back(
        {static_cast<double>(width * sizeof(double)), strided_copy_Bps(rows, width, simulator)});
  }
  std::sort(points.begin(), points.end(),
            [](const auto& a, const auto& b) { return a.row_bytes < b.row_bytes; });
  return points;
}

std::pair<double, double> copy_and_reduce_Bps(std::size_t bytes) {
  const std::size_t n = bytes / sizeof(double);
  std::vector<double> a(n, 1.0), b(n, 2.0);
  std::memcpy(a.data(), b.data(), bytes);  // warm
  std::vector<double> copies, sums;
  for (int i = 0; i < 5; ++i) {
    auto t = Clock::now();
    std::memcpy(a.data(), b.data(), bytes);
    copies.push_back(static_cast<double>(bytes) / since(t));
    t = Clock::now();
    for (std::size_t j = 0; j < n; ++j) a[j] += b[j];
    sums.push_back(static_cast<double>(bytes) / since(t));
  }
  if (a[n / 2] < 0) copies.push_back(0);  // keeps the sums observable
  return {median_of(copies), median_of(sums)};
}

// One call of each collective of kCollectiveOps (model.hpp) on a group (every member with its
// buffers for `count` elements in all; root 0): CollectiveCall below. Across hosts, also
// kAllgathervAfterScatterv (fsdp's and hsdp's executions): over TCP the exchange then runs at up to
// half the rate it does after a barrier (measured over the shaped namespace hosts: 4 MiB each way
// in 341 ms after a 64 KiB or larger one-way message, 175 ms after a barrier). Timed from the last
// member's entry. What that scatter sends each other member: fsdp's rows of A, at least the 64 KiB
// above.
constexpr std::size_t kScatterBeforeBytes = 256u << 10;
// The tag of the ring shift that places an all-gather's blocks before its first call.
constexpr int kPlaceTag = 11;

struct CollectiveCall {
  std::string op;
  RowMajor layout;                  // the columns forms: rows x width, counts count columns
  std::vector<std::size_t> counts;  // per member
  std::size_t count = 0;            // elements in all
  std::size_t mine = 0;             // elements of this member's block

  // `name` may end in kThenCompute: the call is the collective before it (the sweep has
  // the members multiply after it).
  CollectiveCall(std::string name, std::size_t elements, int members, int me)
      : op(std::move(name)) {
    if (op.ends_with(kThenCompute)) op.resize(op.size() - std::string_view(kThenCompute).size());
    if (op.ends_with("_columns")) {
      // Rows a power of two (the largest not above the square's), as the shapes of machine
      // learning have: a column whose elements lie a power of two apart costs more to (un)pack
      // than others (Open MPI's gather of 2 ranks' halves, the root unpacking, per byte
      // moved: 64 MiB as 2896 x 2896 1.15 ns, as 2048 x 4096 1.70; 512 MiB as 8192 x 8192
      // 1.62. From the square ones the model had costed tp-col 8192 x 256 x 8192's gather of
      // C 0.30 s, measured 0.49-0.56).
      layout.rows = calibration_rows(elements);
      layout.width = std::max<std::size_t>(1, elements / layout.rows);
      counts = shard_counts(layout.width, members);
      count = layout.rows * layout.width;
      mine = counts[static_cast<std::size_t>(me)] * layout.rows;
    } else {
      counts = shard_counts(elements, members);
      count = elements;
      mine = counts[static_cast<std::size_t>(me)];
    }
  }
  bool all_gather() const { return op == "allgatherv" || op == kAllgathervAfterScatterv; }
  // Every member sends and receives at once (the others: one way, to or from a root).
  bool exchanges() const { return all_gather() || op == "allreduce" || op == "reduce_scatter"; }
  // The whole buffer is needed by every member, or by the root only.
  bool whole_everywhere() const {
    return op == "broadcast" || all_gather() || op == "allreduce" || op == "reduce" ||
           op == "reduce_scatter";
  }
  // Seconds this member spent in the part of the call that counts (after its entry into the
  // all-gather for kAllgathervAfterScatterv, whose scatter from member 0 goes first), or
  // nothing: the whole call counts. `before` holds the scatter's blocks at member 0 (its own
  // at the others).
  std::optional<double> run(Communicator& g, std::span<double> whole, std::span<double> part,
                            std::span<double> before = {}) const {
    const bool root = g.rank() == 0;
    const std::span<const double> none;
    if (op == kAllgathervAfterScatterv) {
      const std::size_t each = kScatterBeforeBytes / sizeof(double);
      std::vector<std::size_t> blocks(static_cast<std::size_t>(g.size()), each);
      if (root)
        g.scatterv(before, blocks, in_place, 0);
      else
        g.scatterv(none, blocks, before, 0);
      const auto entered = Clock::now();
      g.allgatherv(part, whole, counts);
      return since(entered);
    }
    if (op == "broadcast") {
      g.broadcast(whole, 0);
    } else if (op == "scatterv") {
      if (root)
        g.scatterv(whole, counts, in_place, 0);
      else
        g.scatterv(none, counts, part, 0);
    } else if (op == "gatherv") {
      if (root)
        g.gatherv(in_place, whole, counts, 0);
      else
        g.gatherv(part, std::span<double>{}, counts, 0);
    } else if (op == "scatterv_columns") {
      if (root)
        g.scatterv_columns(whole, layout, counts, in_place, 0);
      else
        g.scatterv_columns(none, layout, counts, part, 0);
    } else if (op == "gatherv_columns") {
      if (root)
        g.gatherv_columns(in_place, whole, layout, counts, 0);
      else
        g.gatherv_columns(part, std::span<double>{}, layout, counts, 0);
    } else if (op == "allgatherv") {
      g.allgatherv(part, whole, counts);
    } else if (op == "allreduce") {
      g.allreduce_sum(whole);
    } else if (op == "reduce") {
      g.reduce_sum(whole, 0);
    } else {
      g.reduce_scatter_sum(whole, part, counts);
    }
    return std::nullopt;
  }
};

constexpr double kPairCall_s = 0.25;
// Open MPI's TCP transport sends messages up to this size eagerly (btl_tcp_eager_limit).
constexpr std::size_t kEagerBytes = 64u << 10;
// What a calibration may take, less a margin: the re-checks at its end run only within it.
constexpr double kBudget_s = 88;
constexpr std::size_t kThenComputeFromBytes = 4096;

// Multiplies (small, cache-resident: the core's rate) until `seconds` have passed.
void multiply_for(double seconds) {
  static const arma::mat a(256, 256, arma::fill::randu), b(256, 256, arma::fill::randu);
  arma::mat c;
  const auto start = Clock::now();
  while (since(start) < seconds) c = a * b;
}

// A call on more bytes takes no less time than one on fewer: a smaller size's median above a
// larger one's is the scheduler's, not the bytes' (under load, 2 rank threads with other
// processes on 2 cores: an 8 B gather's median 4.0 ms, the 16 MiB one's 4.0 ms), and it
// takes the larger's. `points` grow in bytes.
void no_faster_when_larger(std::vector<CollectivePoint>& points) {
  for (std::size_t i = points.size(); i-- > 1;) {
    points[i - 1].s = std::min(points[i - 1].s, points[i].s);
  }
}

// Across hosts, a first call's excess over a warm one is capped at what first touching its
// buffers' pages can cost: three times its bytes (each member's whole buffer, its part and the
// library's temporary) at the per-page figure calibrate measured. Beyond it the excess is not
// the buffers', and runs did not show it: at 200 Mbit/s, 1 rank per host, a 16 MiB all-reduce
// of 0.71 s read 0.49 s of first use in one calibration and 0.35 s in another (a second first
// call, on other fresh buffers, as slow), 0 in others; tp-col training 8192 x 512 x 512,
// whose first step all-reduces 32 MiB of fresh buffers, took 1.647 s in that step and 1.641
// in the later ones, where the 0.49 s had predicted the first 1.03 s longer.
void cap_first_use_across_hosts(std::vector<CollectiveCurve>& curves, double s_per_page) {
  for (CollectiveCurve& curve : curves) {
    if (curve.one_host()) continue;
    for (CollectivePoint& point : curve.points) {
      point.first_use_s =
          std::min(point.first_use_s, 3.0 * static_cast<double>(point.bytes) / 4096.0 * s_per_page);
    }
  }
}

// A member's calls of one size: when each ended and when it entered the part that counts
// (0 but for the all-gather after a scatter), in seconds from the call's common start.
struct Timed {
  std::vector<double> ends, entries;
  double first_faults = 0;  // the pages the first call populated (this rank's, or thread's)
};

// Measures every collective on `group` (this rank's group: disjoint groups of the same size
// measure at once, `groups` of them) over a sweep of sizes, warm and on fresh buffers. Every
// rank of `world` calls it; a call's time is the slowest member's (over every group), from a
// common start (a barrier of the world, after `idle_s` of idleness). Sizes stop growing once
// a warm call takes `max_call_s` (across hosts: not before 1 MiB while a call takes at most
// kPairCall_s) or at `max_bytes`.
std::vector<CollectiveCurve> collective_sweep(Communicator& world, Communicator& group,
                                              int ranks_per_host, int groups, std::size_t max_bytes,
                                              double max_call_s, double idle_s,
                                              std::vector<const char*> ops = {}) {
  std::vector<CollectiveCurve> curves;
  const bool one_process = world.backend() == "simulator";
  const int me = group.rank(), members = group.size();
  if (ops.empty()) ops.assign(std::begin(kCollectiveOps), std::end(kCollectiveOps));
  // The world's all-gather after a scatter, where the world spans hosts (fsdp's; hsdp's
  // shard groups are the world with one replica).
  if (&group == &world && ranks_per_host < members) ops.push_back(kAllgathervAfterScatterv);
  // The world's broadcast and scatter whose members multiply next (tp-col's, dp's).
  if (&group == &world)
    ops.insert(ops.end(), std::begin(kThenComputeOps), std::end(kThenComputeOps));
  for (const char* name : ops) {
    // The all-gather after a scatter: its half rate shows only once each member's block is a few
    // MiB (measured: 1 MiB each way ran at the full rate, 4 MiB at half): sweep it until a block is
    // 4 MiB and a call takes 50 ms (the model carries a rate beyond the largest call only from such
    // a call), with 2 warm calls at such sizes (on a 200 Mbit/s link a call then takes seconds).
    // And the world's all-reduce across hosts (dp's gradients, tp-col's input gradient), whose
    // sends cross both ways at once: measured at 200 Mbit/s, 1 rank per host, 2 MiB at half
    // the links' rate, 16 MiB at 0.65-0.9 of it, 32 MiB (tp-col training's m x k) at 0.6-0.9;
    // a step of tp-col training 8192 x 512 x 512, 1.6 s measured, was predicted 2.96 s carried
    // from 2 MiB, 2.23 s from 16 MiB (3.6 s more of calibration with 2 ranks per host).
    const bool until_large =
        std::string_view(name) == kAllgathervAfterScatterv ||
        (idle_s > 0 && &group == &world && std::string_view(name) == "allreduce");
    // The world's columns forms (tp-col's, tp-row's) on one host up to the largest size: the
    // model carries a large run's cost per byte from the largest call, and one call of 16 MiB
    // carried 32-fold sets it with its noise (mpirun -np 4: a 16 MiB gather read 26.9 ms,
    // carried to tp-col 8192 x 256 x 8192's 512 MiB 0.86 s where it took 0.73; from the
    // 64 MiB call, 99.5 ms, 0.80 s).
    const bool to_largest = std::string_view(name).ends_with("_columns") && &group == &world &&
                            ranks_per_host >= members;
    CollectiveCurve curve;
    curve.op = name;
    curve.ranks = members;
    curve.ranks_per_host = ranks_per_host;
    curve.groups = groups;
    // The ones whose members multiply next from 4 KiB (below it the model keeps the plain
    // collective's curve: there the root's few eager messages are out before anyone computes).
    const bool then_compute = std::string_view(name).ends_with(kThenCompute);
    std::vector<std::size_t> sizes;
    for (std::size_t bytes = then_compute ? kThenComputeFromBytes : 8; bytes < max_bytes;
         bytes *= 8) {
      sizes.push_back(bytes);
    }
    sizes.push_back(max_bytes);
    double previous_s = 0, first_s = 0;
    for (std::size_t bytes : sizes) {
      const CollectiveCall call(name, bytes / sizeof(double), members, me);
      const bool needs_whole = call.whole_everywhere() || me == 0;
      // `calls` calls on buffers fresh from the kernel: the first uses them for the first
      // time, the others are warm.
      const auto measure = [&](int calls) {
        const FreshPages whole(needs_whole ? call.count : 0);
        // allgatherv sends its own block from a buffer of its own; the others' parts are
        // received (or sent) by non-roots only.
        const FreshPages part(
            call.all_gather() || call.op == "reduce_scatter" || me != 0 ? call.mine : 0);
        const FreshPages before(call.op != kAllgathervAfterScatterv
                                    ? 0
                                    : kScatterBeforeBytes / sizeof(double) *
                                          (me == 0 ? static_cast<std::size_t>(members) : 1));
        // An all-gather sends what a plan's setup placed, its shard of B, which the network
        // wrote then (fsdp's and hsdp's setup scatter it). Over TCP a block sent from such pages
        // costs nothing more on its first send; one the CPU wrote, as much as a page received.
        // A plain MPI program, 2 hosts of 2 ranks at 1 Gbit/s, each host's pair all-gathering
        // 32 MiB at once: the first call took 0.109-0.121 s longer than a warm one from fresh
        // blocks, 0.075-0.085 from blocks scattered to them, 0.091-0.139 from blocks a rank
        // sent itself; on one host (shared memory) 0.02-0.12 s either way. hsdp
        // 32 x 2048 x 2048's cold all-gather took 0.065-0.080 s longer than its warm ones, and
        // from fresh blocks calibrate had predicted its execution +23 to +43 %. Each member's
        // block comes from the one before it in a ring shift, all at once (a scatter from member
        // 0 sends all but one block over the root's link in turn: seconds more across hosts).
        if (call.all_gather() && members > 1) {
          const int next = (me + 1) % members, previous = (me + members - 1) % members;
          const FreshPages source(call.counts[static_cast<std::size_t>(next)]);
          group.sendrecv(std::span<const double>(source.span()), next, kPlaceTag, part.span(),
                         previous, kPlaceTag);
        }
        // The library's own temporaries (a reduction's, a packed datatype's) come fresh from
        // the kernel in a new process: hand what the C library kept back to the kernel first.
        release_freed_memory();
        Timed timed;
        for (int i = 0; i < calls; ++i) {
          // Idle first, as a run's collectives follow its multiplies: a network link's queue
          // drains and a token bucket refills (a shaped link lets a burst through faster).
          // Twice the last call's time, within [1 ms, idle_s].
          if (idle_s > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(
                2 * (timed.ends.empty() ? previous_s : timed.ends.back()), 1e-3, idle_s)));
          }
          world.barrier();
          const std::uint64_t faults = minor_page_faults(one_process);
          const auto start = Clock::now();
          const std::optional<double> counted =
              call.run(group, whole.span(), part.span(), before.span());
          timed.ends.push_back(since(start));
          if (i == 0)
            timed.first_faults = static_cast<double>(minor_page_faults(one_process) - faults);
          timed.entries.push_back(counted ? timed.ends.back() - *counted : 0.0);
          // Multiplying while the root serves the others, longer than that takes (untimed).
          if (then_compute) multiply_for(std::min(0.01 + 1.5 * previous_s, 0.25));
        }
        return timed;
      };
      // Enough warm calls for a steady median, within about 30 ms (at least 3). Across hosts a
      // message beyond Open MPI's eager limit (its TCP transport's: 64 KiB) is sent once the
      // receiver answers; where every member sends at once the answer may queue behind the
      // answering member's own data, and the two ways run one after the other: at random, a quarter
      // to a half of calls (1 MiB each way at 200 Mbit/s: 43.5 or 85.4 ms; dp training's 2 MiB
      // all-reduce 89-92 ms or 132-148, tp-col's 16 MiB 0.716 or 1.02-1.06 s; one calibration read
      // that all-reduce at 1.06 s, another 1.40, the runs' median 0.72). In a plain MPI program the
      // first two such calls of a connection ran at the full rate every time, later ones at random
      // (neither the idle before a call, 0.01 to 0.4 s, nor the link's queue, 10 to 100 ms, changed
      // that), and once a call ran one way after the other the next ones mostly did too (series of
      // 10 all-gathers of 1 MiB a rank: 0, 7, 7 and 9 slow): calibrate's calls come late, a short
      // run's early. Two sockets per pair of ranks (btl_tcp_links=2) removed it, but hung
      // Open MPI 4.1.4 in the gather of columns (README, "Running on several machines"). Such a
      // curve keeps the calls' expected time (expected_of), from up to 5 calls within about 0.6 s
      // (a calibration across 2 hosts of 2 ranks at 200 Mbit/s takes 80 s of its 90 as it is: with
      // up to 7 calls within a second it took 90.9). Calls one way (to or from a root) have no such
      // race: they keep the median, which leaves out a rare stall of the link.
      const bool rendezvous = !curve.one_host() && call.exchanges() &&
                              bytes / static_cast<std::size_t>(members) > kEagerBytes;
      const int reps =
          then_compute      ? 3
          : previous_s <= 0 ? 10
          : rendezvous      ? static_cast<int>(std::clamp(0.6 / (previous_s * 8),
                                                     previous_s * 8 > max_call_s ? 2.0 : 3.0, 5.0))
          : previous_s * 8 > max_call_s
              ? 2
              : static_cast<int>(std::clamp(0.03 / (previous_s * 8), 3.0, 15.0));
      // The first call (fresh buffers), then warm ones; within one host, where a call is short,
      // a second first call on other fresh buffers (the less of the two first calls counts: a
      // single one is at the scheduler's mercy with more ranks than cores: one --ranks 4
      // calibration read 175 ms of first use on a 64 MiB broadcast, 1 ms at 16 MiB, and
      // fsdp's cold runs showed none of it). Each host's group in a calibration across hosts
      // too: 2 hosts of 2 ranks at 200 Mbit/s, one calibration's host groups read 30 ms of first
      // use on a 256 KiB reduce-scatter of 0.5 ms and 73 ms on a 16 MiB all-gather of 22 ms,
      // and predicted hsdp 32 x 2048 x 2048's cold execution 0.225 s against 0.066 measured.
      Timed timed = measure(reps + 1);
      // Where the world is on one host, longer calls too (its calibration takes 30-60 s of
      // the 90): the column forms' largest call is carried to a run's size, and one
      // mpirun -np 2 calibration read 56 ms of first use on a 64 MiB gather of columns, three
      // others 0-2.4 ms; carried to tp-col 8192 x 256 x 8192's 512 MiB it predicted the cold
      // execution +49 % (1.21 s, 0.81 measured).
      const bool second_first =
          curve.one_host() && (previous_s * 8 < 0.05 || ranks_per_host >= world.size());
      if (second_first) {
        const Timed again = measure(1);
        timed.ends.push_back(again.ends.front());
        timed.entries.push_back(again.entries.front());
      }
      // Every member's end and entry of each call, gathered at the root.
      const std::size_t calls = timed.ends.size();
      std::vector<double> mine = timed.ends;
      mine.insert(mine.end(), timed.entries.begin(), timed.entries.end());
      mine.push_back(timed.first_faults);
      const std::size_t stride = mine.size();
      std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
      world.gatherv(mine, all,
                    std::vector<std::size_t>(static_cast<std::size_t>(world.size()), mine.size()),
                    kRoot);
      std::vector<double> point(3, 0.0);  // warm, first use, the pages it populated
      if (world.rank() == kRoot) {
        // Each call from its last member's entry (the common start, but for the all-gather
        // after a scatter) to its last member's end. The all-gather after a scatter was timed
        // to the first member's end (the least time in it): at 200 Mbit/s, 2 hosts of 2 ranks,
        // the last member ended 100 ms after the first in fsdp 700 x 1000 x 500's 4 MB
        // all-gather of B (0.32 s from the last entry), and fsdp's executions came out 16-28 %
        // longer than predicted.
        std::vector<double> last_end(calls, 0.0), last_entry(calls, 0.0);
        for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r) {
          for (std::size_t i = 0; i < calls; ++i) {
            last_end[i] = std::max(last_end[i], all[r * stride + i]);
            last_entry[i] = std::max(last_entry[i], all[r * stride + calls + i]);
          }
          // The member that populated most (a reduction's root, its temporaries).
          point[2] = std::max(point[2], all[r * stride + 2 * calls]);
        }
        std::vector<double> slowest(calls);
        for (std::size_t i = 0; i < calls; ++i) slowest[i] = last_end[i] - last_entry[i];
        const auto warm_end = slowest.end() - (second_first ? 1 : 0);
        const std::vector<double> warm(slowest.begin() + 1, warm_end);
        point[0] = rendezvous ? expected_of(warm) : median_of(warm);
        const double first =
            second_first ? std::min(slowest.front(), slowest.back()) : slowest.front();
        point[1] = std::max(0.0, first - point[0]);
      }
      world.broadcast(point, kRoot);
      curve.points.push_back(
          {call.count * sizeof(double), std::max(point[0], 1e-9), point[1], point[2]});
      // The next size takes about 8 times as long: stop before it passes max_call_s.
      previous_s = point[0];
      const bool large =
          point[0] >= 0.05 && bytes / static_cast<std::size_t>(members) >= (4u << 20);
      // Across hosts the model reads how a collective's bytes go from its two largest calls
      // once the larger is 1 MiB (model.cpp, CollectiveCurve::time): reach it where that call
      // takes at most kPairCall_s. Measured at 200 Mbit/s, 2 hosts of 2 ranks: the
      // all-reduce stopped at 256 KiB (15 ms); Open MPI's Rabenseifner, whose two ranks of a
      // host cross at once, then ran 32 MiB in 2.6 s against the links' 1.4.
      const bool short_of_pair = idle_s > 0 && bytes < (1u << 20) && point[0] * 8 <= kPairCall_s;
      if (first_s == 0) first_s = point[0];
      if (then_compute) {
        // Most of such a call is its hand-offs (a scheduler's time slice each), the same at
        // every size: the growth beyond the first size says how long the next one takes.
        if ((point[0] - first_s) * 8 + first_s > kPairCall_s) break;
        continue;
      }
      if (point[0] * 8 > max_call_s && !(until_large && !large) && !short_of_pair && !to_largest) {
        break;
      }
    }
    // The columns forms round sizes down to whole rows: keep the sizes growing (of two calls
    // of one size, the later: the one the stopping rule read).
    std::vector<CollectivePoint> kept;
    for (const CollectivePoint& pt : curve.points) {
      if (kept.empty() || pt.bytes > kept.back().bytes) {
        kept.push_back(pt);
      } else if (pt.bytes == kept.back().bytes) {
        kept.back() = pt;
      }
    }
    curve.points = kept;
    no_faster_when_larger(curve.points);
    curves.push_back(curve);
  }
  return curves;
}

// Each curve of `kept` that `again` measured once more keeps, at each size, the faster of
// the two calls; sizes only one of them reached are kept as they are.
void merge_faster(std::vector<CollectiveCurve>& kept, const std::vector<CollectiveCurve>& again) {
  for (const CollectiveCurve& b : again) {
    auto a = std::find_if(kept.begin(), kept.end(), [&](const CollectiveCurve& c) {
      return c.op == b.op && c.ranks == b.ranks && c.ranks_per_host == b.ranks_per_host &&
             c.groups == b.groups;
    });
    if (a == kept.end()) continue;
    std::vector<CollectivePoint> points = a->points;
    for (const CollectivePoint& q : b.points) {
      auto same = std::find_if(points.begin(), points.end(),
                               [&](const CollectivePoint& p) { return p.bytes == q.bytes; });
      if (same == points.end()) {
        points.push_back(q);
      } else if (q.s < same->s) {
        *same = q;
      }
    }
    std::sort(points.begin(), points.end(),
              [](const CollectivePoint& x, const CollectivePoint& y) { return x.bytes < y.bytes; });
    no_faster_when_larger(points);
    a->points = std::move(points);
  }
}

// fsdp-overlap's contention over a link: the ranks of `ring` shift a shard around the ring
// (sendrecv) while a helper thread multiplies, sized so that both take about as long; the
// fraction of the shorter that the pair takes beyond the longer (0: truly parallel, 1: one
// after the other, up to kMaxContention: worse than one after the other, as with more ranks
// than cores, where the helpers, at a lower priority, wait while other ranks' main threads
// poll for their messages). Each round's time is the slowest member's (a ring step ends when
// its last message lands; rank 0's own time had read 0.69-0.75 of the link's where two flows
// crossed a 200 Mbit/s link each way, the other flow finishing after it). Every member calls
// it; the contention and the exchange alone over the link's time for its size are returned
// on all.
struct RingFigures {
  double contention = 0;
  double exchange_slowdown = 1;
};
RingFigures overlap_contention(Communicator& ring, const LinkModel& link, std::size_t max_bytes) {
  const int p = ring.size(), r = ring.rank();
  // A shard the link moves in about 20 ms (at most max_bytes), and a multiply as long.
  std::size_t bytes = 1u << 16;
  while (bytes < max_bytes && link.time(bytes * 2) < 0.02) bytes *= 2;
  const std::size_t count = bytes / sizeof(double);
  arma::mat out = fresh_matrix<double>(count, 1), in = fresh_matrix<double>(count, 1);
  out.fill(1.0);
  const double exchange_s = link.time(bytes);
  const auto n =
      static_cast<std::size_t>(std::clamp(std::cbrt(exchange_s * 40e9 / 2), 64.0, 2048.0));
  arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu), c(n, n, arma::fill::zeros);
  const std::function<void()> multiply = [&] { c = a * b; };
  const auto shift = [&] { ring.sendrecv(out, (r + 1) % p, 9, in, (r + p - 1) % p, 9); };
  HelperThread helper;
  const auto overlapped = [&] {
    helper.run(multiply);
    shift();
    helper.wait();
  };
  // The three in rounds (drift and other ranks' scheduling touch all three alike); the
  // first round warms buffers and pages. More ranks than cores make single calls swing by
  // tens of percent: the median of kRounds - 1.
  constexpr int kRounds = 9;
  std::vector<double> exchanges, multiplies, boths;
  const auto timed = [&](const std::function<void()>& what, std::vector<double>& into) {
    ring.barrier();
    const auto start = Clock::now();
    what();
    ring.barrier();
    into.push_back(since(start));
  };
  for (int i = 0; i < kRounds; ++i) {
    timed(shift, exchanges);
    timed(multiply, multiplies);
    timed(overlapped, boths);
  }
  const auto settled = [](std::vector<double> t) {
    t.erase(t.begin());
    return median_of(t);
  };
  const double alone_exchange = settled(exchanges), alone_multiply = settled(multiplies),
               both = settled(boths);
  const double shorter = std::min(alone_exchange, alone_multiply);
  std::vector<double> f{
      std::clamp((both - std::max(alone_exchange, alone_multiply)) / std::max(shorter, 1e-9), 0.0,
                 kMaxContention),
      std::clamp(alone_exchange / std::max(link.time(bytes), 1e-9), 0.25, kMaxContention)};
  ring.broadcast(f, 0);
  return {f[0], f[1]};
}

}  // namespace

int run_calibrate_job(Communicator& comm, const Options& options, std::ostream& out,
                      std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  const auto started = Clock::now();
  const bool quick = options.calibrate_quick;
  // Before anything else multiplies in this process: what its first multiply costs more.
  const double first_call_s = gemm_first_call_s(comm);
  const std::vector<RankPlacement> placement = gather_placement(comm, kRoot);
  // Which rank shares rank 0's host, and which does not (the two link classes).
  std::vector<double> peers{-1, -1};
  if (root) {
    for (std::size_t r = 1; r < placement.size(); ++r) {
      const bool same = placement[r].host == placement[0].host;
      double& slot = peers[same ? 0 : 1];
      if (slot < 0) slot = static_cast<double>(r);
    }
  }
  comm.broadcast(peers, kRoot);
  const auto progress = [&](const std::string& line) {
    if (root) err << "distmm calibrate: " << line << std::endl;
  };

  std::vector<std::size_t> sizes{8, 64, 512, 4096, 32768, 262144, 1u << 20, 4u << 20};
  if (!quick) {
    sizes.push_back(16u << 20);
    sizes.push_back(64u << 20);
  }
  std::vector<double> buffer(sizes.back() / sizeof(double), 1.0);
  MachineModel model;
  // The ping-pong across hosts as measured (sizes, one-way times): measured again later.
  std::vector<std::size_t> inter_sizes;
  std::vector<double> inter_times;
  const auto sweep = [&](int peer, const char* what) {
    auto t = Clock::now();
    std::vector<double> times;
    std::vector<std::size_t> measured;
    for (std::size_t s : sizes) {
      // On a slow link the largest messages would take minutes: stop once one takes 50 ms,
      // well into the link's bandwidth (the fitted line goes on beyond the last size
      // measured). Rank 0 decides for all.
      if (!times.empty() && times.back() > 0.05) break;
      // The last size's time scaled to this one (an overestimate while latency dominates).
      const double expected = times.empty() ? 0.0
                                            : times.back() * static_cast<double>(s) /
                                                  static_cast<double>(measured.back());
      times.push_back(ping_pong(comm, 0, peer, s, buffer, expected));
      measured.push_back(s);
    }
    std::ostringstream line;
    line.precision(3);
    line << "ping-pong " << what << " (ranks 0 and " << peer << "): " << measured.size()
         << " sizes, 8 B to " << (measured.back() >> 10) << " KiB: " << times.front() * 1e6
         << " us latency, " << static_cast<double>(measured.back()) / times.back() / 1e9
         << " GB/s at the largest (" << since(t) << " s)";
    if (peer == static_cast<int>(peers[1])) {
      inter_sizes = measured;
      inter_times = times;
    }
    LinkModel link = fit_link(measured, times);
    link.first_use_s_per_page = first_use_per_page(
        comm, 0, peer, std::min<std::size_t>(measured.back(), quick ? (4u << 20) : (16u << 20)));
    line << "; first use of a buffer " << link.first_use_s_per_page * 1e6 << " us per 4 KiB page";
    progress(line.str());
    return link;
  };
  if (comm.size() < 2) {
    throw InputError(
        "calibrate: needs at least 2 ranks to measure links (mpirun -np 2, or "
        "--ranks 2)",
        -1, "calibrate");
  }
  if (peers[0] >= 0) model.intra = sweep(static_cast<int>(peers[0]), "on one host");
  if (peers[1] >= 0) model.inter = sweep(static_cast<int>(peers[1]), "across hosts");
  if (model.intra.pieces.empty()) model.intra = model.inter;  // one rank per host

  // Collective sweeps: on the world, and where ranks span hosts, on the groups of each host
  // and the groups across hosts (HSDP's shard and replica groups), each group beside the
  // others as HSDP runs them.
  // Which host each rank is on (0: rank 0's), known to every rank.
  std::vector<double> host_of(static_cast<std::size_t>(comm.size()), 0.0);
  if (root) {
    std::vector<std::string> hosts;
    for (std::size_t r = 0; r < placement.size(); ++r) {
      auto it = std::find(hosts.begin(), hosts.end(), placement[r].host);
      host_of[r] = static_cast<double>(it - hosts.begin());
      if (it == hosts.end()) hosts.push_back(placement[r].host);
    }
  }
  comm.broadcast(host_of, kRoot);
  // The ranks of rank 0's host (the intra-host contention).
  const auto host0 =
      comm.split(host_of[static_cast<std::size_t>(comm.rank())] == 0 ? 0 : kNoColor, comm.rank());
  const int hosts = static_cast<int>(*std::max_element(host_of.begin(), host_of.end())) + 1;
  std::vector<int> on_host(static_cast<std::size_t>(hosts), 0);
  int local_index = 0;  // this rank's index among its host's ranks
  for (int r = 0; r < comm.size(); ++r) {
    const auto h = static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)]);
    if (r == comm.rank()) local_index = on_host[h];
    ++on_host[h];
  }
  const int most = *std::max_element(on_host.begin(), on_host.end());
  const std::size_t max_bytes = quick ? (16u << 20) : (64u << 20);
  const double max_call_s = 0.1;
  // Between calls across hosts: up to 10 ms (a 256 KiB token bucket refills in 10 ms at
  // 200 Mbit/s).
  const double idle_s = hosts > 1 ? 0.01 : 0.0;
  double world_sweep_s = 0;  // how long the world's collective sweep took
  {
    auto t = Clock::now();
    const bool even = std::all_of(on_host.begin(), on_host.end(), [&](int c) { return c == most; });
    std::vector<CollectiveCurve> curves =
        collective_sweep(comm, comm, most, 1, max_bytes, max_call_s, idle_s);
    world_sweep_s = since(t);
    std::string groups = "the world";
    if (hosts > 1 && most > 1 && even) {
      // The ranks across hosts with the same index on theirs (HSDP's replica groups).
      const auto cross_group = comm.split(local_index, comm.rank());
      const auto host_group =
          comm.split(static_cast<int>(host_of[static_cast<std::size_t>(comm.rank())]), comm.rank());
      // HSDP's shard groups scatter B's shards, all-gather them, reduce-scatter training's
      // gradients and gather W: the other five kinds had taken 4.9 s of a calibration on 2
      // hosts of 2 ranks at 200 Mbit/s, whose target is 90 s.
      for (auto& c : collective_sweep(comm, *host_group, most, hosts, max_bytes, max_call_s, idle_s,
                                      {"scatterv", "allgatherv", "reduce_scatter", "gatherv"})) {
        curves.push_back(std::move(c));
      }
      // HSDP's replica groups only broadcast (placing B) and all-reduce (training's gradients).
      for (auto& c : collective_sweep(comm, *cross_group, 1, most, max_bytes, max_call_s, idle_s,
                                      {"broadcast", "allreduce"})) {
        curves.push_back(std::move(c));
      }
      groups += ", each host's ranks and the ranks across hosts";
    }
    model.collectives = std::move(curves);
    // fsdp-overlap's contention: within rank 0's host, and across hosts.
    // And how much longer than the links' time the exchange takes alone.
    RingFigures intra, inter;
    if (host0 && host0->size() > 1) intra = overlap_contention(*host0, model.intra, max_bytes);
    comm.barrier();
    if (hosts > 1) {
      // fsdp-overlap's own ring: the world's, in rank order over the real placement (with 2
      // ranks per host one message each way crosses between the hosts, where the groups across
      // hosts had sent two).
      inter = overlap_contention(comm, model.inter, max_bytes);
      if (!(host0 && host0->size() > 1)) intra = inter;
    }
    std::vector<double> figures{intra.contention, inter.contention, intra.exchange_slowdown,
                                inter.exchange_slowdown};
    comm.broadcast(figures, kRoot);
    model.intra.overlap_contention = figures[0];
    model.inter.overlap_contention = figures[1];
    model.intra.exchange_slowdown = figures[2];
    model.inter.exchange_slowdown = figures[3];
    std::ostringstream line;
    line.precision(3);
    line << "collectives: " << std::size(kCollectiveOps) << " kinds on " << groups << ", 8 B to "
         << (max_bytes >> 20) << " MiB; a ring exchange beside a multiply: contention "
         << model.intra.overlap_contention << " on one host";
    if (hosts > 1) line << ", " << model.inter.overlap_contention << " across hosts";
    line << "; the exchange alone " << model.intra.exchange_slowdown;
    if (hosts > 1) line << " and " << model.inter.exchange_slowdown;
    line << " times the link's time";
    line << " (" << since(t) << " s)";
    progress(line.str());
  }

  // The multiply rates, measured as a run multiplies: on every rank at once, sharing the
  // memory bandwidth, and the cores where ranks share them (also where hosts share a machine,
  // as bench/validate_model.py's namespace hosts do: measured on one host's ranks alone while
  // the other host's idled, 1 rank per host, 2 BLAS threads, the curve said 77 GFLOP/s and
  // training steps ran at half that). Rank 0 records. First one BLAS thread per rank; then,
  // under MPI, the thread counts a run may use: every rank with its own (as this launch's
  // runs), and one rank per host with all its CPUs (as with one rank per host). The
  // simulator's ranks share one process and its BLAS: those on rank 0 alone.
  const int threads_now = blas_threads();
  std::vector<double> local(5, 0.0);
  auto t = Clock::now();
  std::vector<std::size_t> n{32, 64, 128, 256, 512};
  if (!quick) {
    n.push_back(1024);
    n.push_back(2048);
  }
  double primary_s = 0;  // the one-thread curve's time
  {
    GemmModel g = gemm_curve(1, n, comm);
    primary_s = since(t);
    g.concurrent = on_host[0];
    g.first_call_s = first_call_s;
    comm.barrier();
    g.first_use_s_per_page = gemm_first_use_per_page(quick ? 512 : 1024, comm);
    if (root) model.gemm.push_back(g);
  }
  // Rank 0's thread counts, which decide for all: all its CPUs, and what this launch's runs
  // use. Each rank taking part measures with its own.
  const int mine = static_cast<int>(allowed_cpus().size());
  std::vector<double> counts{static_cast<double>(mine), static_cast<double>(threads_now)};
  comm.broadcast(counts, kRoot);
  const bool one_process = comm.backend() == "simulator";
  const auto more_threads = [&](int threads, bool one_per_host) {
    const bool in = one_process ? root : !one_per_host || local_index == 0;
    const auto group = comm.split(in ? 0 : kNoColor, comm.rank());
    if (group) {
      // With their own narrow efficiencies: threads that share cores with other ranks' (the
      // namespace hosts, 1 rank per host, 2 threads each) ran 16 x 2048 x 2048 at 3-9
      // GFLOP/s, a fifth of what the one-thread curve's efficiency said.
      // One rank per host where the launch has more: for runs placed otherwise than this
      // launch's (which use one thread each), a secondary curve.
      GemmModel g = gemm_curve(threads, n, *group, one_per_host && on_host[0] > 1);
      if (root) model.gemm.push_back(g);
    }
    comm.barrier();
  };
  // More threads only where rank 0 may run them (under mpirun -np 2 each rank has a core).
  if (counts[0] > 1) more_threads(mine, true);
  if (counts[1] != 1 && counts[1] != counts[0]) more_threads(threads_now, false);
  set_blas_threads(threads_now);
  if (root) {
    const int cores = static_cast<int>(host_cpus().size());
    std::ostringstream line;
    line.precision(3);
    line << "gemm: n = 32 to " << n.back() << " with";
    for (const GemmModel& g : model.gemm) {
      line << " " << g.threads << " thread(s): " << g.curve.back().gflops << " GFLOP/s;";
    }
    line << " first use of fresh operands " << model.gemm.front().first_use_s_per_page * 1e6
         << " us per 4 KiB page;";
    for (std::size_t i = 1; i < model.gemm.size(); ++i) {
      model.gemm[i].first_use_s_per_page = model.gemm.front().first_use_s_per_page;
      model.gemm[i].first_call_s = model.gemm.front().first_call_s;
    }
    line << " (" << since(t) << " s)";
    progress(line.str());
    t = Clock::now();
    const std::size_t bytes = quick ? (16u << 20) : (64u << 20);
    local[0] = first_touch_per_page(bytes);
    const auto [copy, reduce] = copy_and_reduce_Bps(bytes);
    local[1] = copy;
    local[2] = reduce;
    local[3] = static_cast<double>(cores);
    local[4] = strided_copy_Bps(2048, bytes / sizeof(double) / 2048, one_process);
    model.strided_copy = strided_copy_points(bytes / 4, one_process);
    const auto [slowest, fastest] =
        std::minmax_element(model.strided_copy.begin(), model.strided_copy.end(),
                            [](const auto& a, const auto& b) { return a.Bps < b.Bps; });
    std::ostringstream mem;
    mem.precision(3);
    mem << "memory: first touch " << local[0] * 1e6 << " us per 4 KiB page, copy " << copy / 1e9
        << " GB/s, reduction " << reduce / 1e9 << " GB/s, strided copy " << local[4] / 1e9
        << " GB/s (by row length " << slowest->Bps / 1e9 << "-" << fastest->Bps / 1e9 << ") ("
        << since(t) << " s)";
    progress(mem.str());
  }
  comm.barrier();
  {
    const auto t_revisit = Clock::now();
    // 4 trials across hosts, where calibrate is longest (each trial populates 160 MiB a rank:
    // 6 took 4.3 s across 2 hosts of 2 ranks).
    model.revisit_s_per_page =
        revisit_per_page(comm, quick ? (8u << 20) : (32u << 20), hosts > 1 ? 4 : 6);
    if (root) {
      std::ostringstream line;
      line.precision(3);
      line << "revisit: a page populated before the process populated more costs "
           << model.revisit_s_per_page * 1e6 << " us on its next use (" << since(t_revisit)
           << " s)";
      progress(line.str());
    }
  }
  {
    const auto t_pool = Clock::now();
    // At most 3 GiB a host (--quick: 1), and an eighth of the memory free now.
    const double free_bytes =
        static_cast<double>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    const auto cap =
        static_cast<std::size_t>(std::min((quick ? 1.0 : 3.0) * (1u << 30), free_bytes / 8));
    // Within 2.5 s across hosts, where calibrate comes near its 90 s (on one host it takes
    // 25-55 s, and 2.5 s found no pool in two calibrations where the sweep without it had
    // found one in every setting).
    const double budget_s = hosts > 1 ? 2.5 : 60.0;
    const FreshPool pool = fresh_pool(comm, one_process ? comm.size() : most, cap, budget_s);
    if (pool.pool_bytes > 0) {
      model.first_touch_pool_bytes = pool.pool_bytes;
      // local[0]: the first touch within it (the root's, measured above; the root writes the
      // model).
      model.first_touch_beyond_s_per_page = local[0] + pool.more_s_per_page;
    }
    if (root) {
      std::ostringstream line;
      line.precision(3);
      if (pool.pool_bytes > 0) {
        line << "fresh memory: beyond " << pool.pool_bytes / (1u << 30)
             << " GiB on a host a page costs " << pool.more_s_per_page * 1e6 << " us more";
      } else {
        line << "fresh memory: no dearer pages found within "
             << static_cast<double>(cap) / (1u << 30) << " GiB or " << budget_s << " s a host";
      }
      line << " (" << since(t_pool) << " s)";
      progress(line.str());
    }
  }
  const std::size_t straggler_n = quick ? 512 : 1024;
  const double straggler_flops = 2.0 * std::pow(static_cast<double>(straggler_n), 3.0);
  double straggler_rate = 0;  // GFLOP/s of the ranks' multiplies there
  {
    const auto t_straggler = Clock::now();
    model.straggler.ranks = comm.size();
    const Stragglers measured = stragglers(comm, straggler_n, quick ? 5 : 9);
    model.straggler.excess = measured.excess;
    straggler_rate = straggler_flops / measured.mean_s / 1e9;
    if (root) {
      std::ostringstream line;
      line.precision(3);
      line << "stragglers: the slowest of " << comm.size() << " ranks' " << straggler_n
           << "^3 multiplies started together " << 100 * model.straggler.excess
           << " % longer than their mean, " << straggler_rate << " GFLOP/s each ("
           << since(t_straggler) << " s)";
      progress(line.str());
    }
  }
  if (hosts > 1) {
    // The link across hosts once more, a minute of multiplies later: this machine's namespace
    // links had run a whole calibration at 56-86 MB/s of a 1 Gbit/s link (stalls of 4 ms at
    // 4 MiB; 256 KiB gathers in 11 ms), while the runs right after it, and every other
    // calibration, moved at 116-119 MB/s (its predictions 55 % off at the median). Each size
    // keeps the faster of its two measures; where the first sweep's largest message took
    // more than kSlowerLink times the second's, the world's collectives (measured right
    // after it) are measured again too and each point keeps the faster call.
    constexpr double kSlowerLink = 1.25;
    t = Clock::now();
    const int peer = static_cast<int>(peers[1]);
    std::vector<double> again;
    for (std::size_t i = 0; i < inter_sizes.size(); ++i) {
      // Three batches (the first sweep's five took 3.9 s at 200 Mbit/s).
      again.push_back(ping_pong(comm, 0, peer, inter_sizes[i], buffer, inter_times[i], 3));
    }
    const double slower = inter_times.back() / again.back();
    for (std::size_t i = 0; i < again.size(); ++i) {
      inter_times[i] = std::min(inter_times[i], again[i]);
    }
    // New pieces; the figures measured beside them (first use, contention, exchange) stay.
    model.inter.pieces = fit_link(inter_sizes, inter_times).pieces;
    // One rank per host: the intra link is the inter's.
    if (peers[0] < 0) model.intra = model.inter;
    std::ostringstream line;
    line.precision(3);
    line << "ping-pong across hosts again: the first sweep's largest message took " << slower
         << " times as long";
    // Within the 90 s a calibration may take: rank 0's clock decides for all.
    std::vector<double> fits{since(started) + 1.2 * world_sweep_s <= kBudget_s ? 1.0 : 0.0};
    comm.broadcast(fits, kRoot);
    if (slower > kSlowerLink && fits[0] > 0) {
      merge_faster(model.collectives,
                   collective_sweep(comm, comm, most, 1, max_bytes, max_call_s, idle_s));
      line << "; the world's collectives measured again, the faster of each point kept";
    } else if (slower > kSlowerLink) {
      line << "; no time left to measure the collectives again (they may describe a slower "
              "link than the runs will see: calibrate again)";
    }
    line << " (" << since(t) << " s)";
    progress(line.str());
  }
  {
    // The runs' multiply rate once more, a while after the gemm phase: the stragglers'
    // multiplies (every rank at once, with the threads this launch's runs use) against the
    // curve of that thread count, where every rank measured it. This machine slows down for
    // tens of seconds at a time: a --ranks 2 calibration's one-thread curve read 12.7-29.5
    // GFLOP/s (21.0 at n = 2048) while 1024^3 probes before and after it read 63.6 and
    // 67.6 with 2 threads, as usual, and three calibrations later 29-37 at n = 1024 and 2048:
    // its predictions came out 45 % slow. Where the stragglers' rate is more than
    // kFasterGemm times the curve's, the curve is measured again (within the budget) and
    // each size keeps the faster figure.
    constexpr double kFasterGemm = 1.25;
    const bool all_ranks_curve =
        threads_now == 1 || (!one_process && on_host[0] == 1 && threads_now == mine);
    // The launch's curve (rank 0 holds the model).
    const auto launch = std::find_if(model.gemm.begin(), model.gemm.end(),
                                     [&](const GemmModel& g) { return g.threads == threads_now; });
    std::vector<double> check{0.0, 0.0, 0.0};  // stragglers' rate over the curve's, fits, curve's
    if (root && all_ranks_curve && launch != model.gemm.end()) {
      check[2] = launch->rate(straggler_flops);
      check[0] = straggler_rate / check[2];
      check[1] = since(started) + 1.2 * primary_s <= kBudget_s ? 1.0 : 0.0;
    }
    comm.broadcast(check, kRoot);
    if (check[0] > kFasterGemm) {
      t = Clock::now();
      std::optional<GemmModel> again;
      if (check[1] > 0) again = gemm_curve(threads_now, n, comm);
      if (root) {
        std::ostringstream line;
        line.precision(3);
        line << "gemm again: " << straggler_n << "^3 multiplies on every rank ran at "
             << straggler_rate << " GFLOP/s, the " << threads_now << "-thread curve said "
             << check[2];
        if (again) {
          std::vector<GemmPoint>& curve = launch->curve;
          for (std::size_t i = 0; i < curve.size() && i < again->curve.size(); ++i) {
            curve[i].gflops = std::max(curve[i].gflops, again->curve[i].gflops);
          }
          line << "; measured again, the faster of each size kept: " << curve.back().gflops
               << " GFLOP/s at n = " << n.back();
        } else {
          line << "; no time left to measure it again (it may describe a slower machine than "
                  "the runs will see: calibrate again)";
        }
        line << " (" << since(t) << " s)";
        progress(line.str());
      }
    }
  }
  model.first_touch_s_per_page = local[0];
  cap_first_use_across_hosts(model.collectives, local[0]);
  model.copy_Bps = local[1];
  model.reduce_Bps = local[2];
  model.cores_per_host = std::max(1, static_cast<int>(local[3]));
  model.strided_copy_Bps = local[4];
  std::ostringstream by;
  by << "distmm calibrate" << (quick ? " --quick" : "") << " on " << comm.size() << " "
     << comm.backend() << " ranks";
  model.measured_by = by.str();
  model.backend = comm.backend() == "simulator" ? "simulator" : "mpi";
  model.name = (root ? placement[0].host : std::string()) + " (" + comm.backend() + ")";
  comm.stats().reset();
  int code = kSuccess;
  if (root) {
    const std::string text = model_json(model);
    if (options.out_file.empty()) {
      out << text << std::flush;
    } else {
      code = write_outputs(err, [&] { save_text(text, options.out_file, "--out"); });
    }
    std::ostringstream line;
    line.precision(3);
    line << "done in " << since(started) << " s"
         << (options.out_file.empty() ? "" : ": " + options.out_file);
    progress(line.str());
  }
  std::vector<double> agreed{static_cast<double>(code)};
  comm.broadcast(agreed, kRoot);
  return static_cast<int>(agreed[0]);
}

}  // namespace distmm::cli

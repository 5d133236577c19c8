#pragma once
// The measurements calibrate makes (calibration.hpp), one file a family: links.cpp,
// multiplies.cpp, memory.cpp, collectives.cpp; calibrate.cpp runs them in turn.
#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <armadillo>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/memory.hpp"
#include "distmm/model.hpp"

namespace distmm::calibration {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The standard deviation of ln(x) over positive measures of one thing (0 for fewer than two):
// how far apart repeated measures lie, the spread a prediction's interval takes in
// (Uncertainty).
inline double log_spread(const std::vector<double>& v) {
  std::vector<double> logs;
  for (double x : v) {
    if (x > 0) logs.push_back(std::log(x));
  }
  if (logs.size() < 2) return 0;
  double mean = 0, sq = 0;
  for (double l : logs) mean += l / static_cast<double>(logs.size());
  for (double l : logs) sq += (l - mean) * (l - mean);
  return std::sqrt(sq / static_cast<double>(logs.size() - 1));
}

// The expected time of calls across hosts whose exchanges take one of two times at random:
// the mean of the calls, each counted at most twice the fastest (an exchange that runs one
// way after the other doubles at most; more is a stall of the link, not the call's cost).
inline double expected_of(const std::vector<double>& v) {
  const double fastest = *std::min_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += std::min(x, 2 * fastest);
  return sum / static_cast<double>(v.size());
}

// Hands the memory the C library kept from freed buffers back to the kernel. Under a
// sanitizer the allocator is the sanitizer's own and glibc's heap was never set up, so its
// malloc_trim() would crash: nothing to hand back there.
inline void release_freed_memory() {
#ifndef DISTMM_SANITIZED
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

struct Rounds {
  double mean_s = 0;  // the median over rounds of the ranks' mean time
  double spread = 0;  // log_spread of the rounds' mean times
};

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

// What a calibration may take, less a margin: the re-checks at its end run only within it.
inline constexpr double kBudget_s = 88;

// One-way time of a message of `bytes` between ranks a and b (half a round trip), the median
// of several batches.
double ping_pong(Communicator& comm, int a, int b, std::size_t bytes, std::vector<double>& buf,
                 double expected_s = 0, int batch_count = 5);

// What a buffer's first use for communication costs more, per 4 KiB page: a round trip of
// `bytes` between ranks a and b on fresh (locally written) buffers, then again on the same
// ones; the first message used two buffers (a's and b's) for the first time.
double first_use_per_page(Communicator& comm, int a, int b, std::size_t bytes);

RingFigures overlap_contention(Communicator& ring, const LinkModel& link, std::size_t max_bytes);

// GFLOP/s of c = a * b (gflops_of).
double multiply_gflops(const arma::mat& a, const arma::mat& b, arma::mat& c, double seconds,
                       std::size_t runs = 3, bool warm_up = true);

// GFLOP/s of n x n x n multiplies (and the narrow shapes') with `threads` BLAS threads on
// each rank of `group`, all multiplying the same shapes at once (lined up before each shape).
GemmModel gemm_curve(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool secondary = false);

// How much longer c = a * b takes the first time than the second (a and b filled first).
double first_multiply_extra_s(arma::mat& a, arma::mat& b, arma::mat& c, Communicator* line_up);

// Every rank's figure, in rank order (every rank gets them).
std::vector<double> of_every_rank(double mine, Communicator& comm);

// The least of the ranks' figures (every rank gets it).
double least_of_ranks(double mine, Communicator& comm);

// Rounds of the same n^3 multiply on every rank, all started together (a barrier before each),
// after one unmeasured: the runs' multiply rate and how much it varies from round to round.
Rounds multiply_rounds(Communicator& comm, std::size_t n, int rounds);

// What a multiply costs more, per 4 KiB page of its operands, the first time it runs on
// freshly allocated (populated) matrices: n x n x n, cold then warm, every rank at once;
// per rank the median of three trials, then the least of the ranks' figures (as for the
// first call).
double gemm_first_use_per_page(std::size_t n, Communicator& comm);

double first_touch_per_page(std::size_t bytes);

// Bytes per second of copying a block of columns between a row-major matrix of rows x width
// and a column-major block, the mean of both directions (a scatter's root packs, a gather's
// unpacks).
double strided_copy_Bps(std::size_t rows, std::size_t width, bool simulator);

std::pair<double, double> copy_and_reduce_Bps(std::size_t bytes);

// Multiplies (small, cache-resident: the core's rate) until `seconds` have passed.
void multiply_for(double seconds);

// A call on more bytes takes no less time than one on fewer: a smaller size's median above a
// larger one's is the scheduler's, not the bytes' (under load, 2 rank threads with other
// processes on 2 cores: an 8 B gather's median 4.0 ms, the 16 MiB one's 4.0 ms), and it
// takes the larger's.
void no_faster_when_larger(std::vector<CollectivePoint>& points);

// Across hosts, a first call's excess over a warm one is capped at what first touching its
// buffers' pages can cost: three times its bytes (each member's whole buffer, its part and the
// library's temporary) at the per-page figure calibrate measured.
void cap_first_use_across_hosts(std::vector<CollectiveCurve>& curves, double s_per_page);

// Measures every collective on `group` (this rank's group: disjoint groups of the same size
// measure at once, `groups` of them) over a sweep of sizes, warm and on fresh buffers.
std::vector<CollectiveCurve> collective_sweep(Communicator& world, Communicator& group,
                                              int ranks_per_host, int groups, std::size_t max_bytes,
                                              double max_call_s, double idle_s,
                                              std::vector<const char*> ops = {});

// Each curve of `kept` that `again` measured once more keeps, at each size, the faster of
// the two calls; sizes only one of them reached are kept as they are.
void merge_faster(std::vector<CollectiveCurve>& kept, const std::vector<CollectiveCurve>& again);

}  // namespace distmm::calibration

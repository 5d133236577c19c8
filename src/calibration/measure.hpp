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
// Batches, not single calls: with more ranks than cores a call shorter than the scheduler's
// slice mostly runs on a core of its own, where a rank gets only its share.
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
  // itself: dropped when there are more than `runs`.
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
// after the other, up to kMaxContention). Each round's time is the slowest member's (a ring
// step ends when its last message lands). Every member calls it; the contention and the
// exchange alone over the link's time for its size are returned on all.
struct RingFigures {
  double contention = 0;
  double exchange_slowdown = 1;
};

// One-way time of a message of `bytes` between ranks a and b (half a round trip), the median
// of several batches. Every rank calls it (with the same `expected_s`, the one-way time the
// caller expects, 0 if none); ranks other than a and b only wait.
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
// With `own_cores` (each rank's threads have cores of their own) each figure is the slowest
// rank's, else the group's mean (multiplies.cpp).
GemmModel gemm_curve(int threads, const std::vector<std::size_t>& sizes, Communicator& group,
                     bool own_cores, bool secondary = false);

// Every rank's figure, in rank order (every rank gets them).
std::vector<double> of_every_rank(double mine, Communicator& comm);

// The least of the ranks' figures (every rank gets it).
double least_of_ranks(double mine, Communicator& comm);

// Rounds of the same n^3 multiply on every rank, all started together (a barrier before each),
// after one unmeasured: the runs' multiply rate and how much it varies from round to round.
Rounds multiply_rounds(Communicator& comm, std::size_t n, int rounds);

double first_touch_per_page(std::size_t bytes);

// Bytes per second of copying a block of columns between a row-major matrix of rows x width
// and a column-major block, the mean of both directions (a scatter's root packs, a gather's
// unpacks), by the tiles both backends copy with (columns.hpp).
double strided_copy_Bps(std::size_t rows, std::size_t width);
// The same by the block's size, 64 KiB, 512 KiB, ... up to `max_bytes`, as the backend's own
// columns collectives copy: a matrix's columns scattered and gathered on `self`, a
// communicator of one rank.
std::vector<StridedPoint> strided_copy_curve(Communicator& self, std::size_t max_bytes);

std::pair<double, double> copy_and_reduce_Bps(std::size_t bytes);

// Multiplies (small, cache-resident: the core's rate) until `seconds` have passed.
void multiply_for(double seconds);

// Measures every collective on `group` (this rank's group: disjoint groups of the same size
// measure at once, `groups` of them) over a sweep of sizes, warm and on fresh buffers.
std::vector<CollectiveCurve> collective_sweep(Communicator& world, Communicator& group,
                                              int ranks_per_host, int groups, std::size_t max_bytes,
                                              double max_call_s, double idle_s,
                                              std::vector<const char*> ops = {});

}  // namespace distmm::calibration

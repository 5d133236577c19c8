// Memory: first touch, revisits, the pool of cheap fresh pages, copy and reduction rates.
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <armadillo>
#include <cmath>
#include <cstring>

#include "calibration/measure.hpp"
#include "distmm/memory.hpp"
#include "sim/columns.hpp"

namespace distmm::calibration {

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
      steps.resize(k);  // the spread of the steps within the pool
      out.more_s_per_page = (median3(k) - base) / (static_cast<double>(host_step) / 4096.0);
      break;
    }
    if (spent > budget_s) break;
  }
  if (mapped) munmap(p, mine * steps_at_most);
  out.spread = log_spread(steps);
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

}  // namespace distmm::calibration

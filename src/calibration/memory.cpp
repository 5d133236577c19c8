// Memory: first touch, copy, reduction and strided-copy rates.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <armadillo>
#include <cmath>
#include <cstring>

#include "calibration/measure.hpp"
#include "columns.hpp"
#include "distmm/memory.hpp"

namespace distmm::calibration {

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

double strided_copy_Bps(std::size_t rows, std::size_t width) {
  const std::size_t cols = width / 2;
  std::vector<double> matrix(rows * width, 1.0), block(rows * cols, 0.0);
  const RowMajor layout{rows, width};
  std::vector<double> rates;
  for (int i = 0; i < 3; ++i) {
    const auto t = Clock::now();
    columns_between(layout, 0, block.size(), matrix.data(), block.data(), true);
    columns_between(layout, 0, block.size(), block.data(), matrix.data(), false);
    rates.push_back(static_cast<double>(block.size() * sizeof(double)) * 2 / since(t));
  }
  if (block[rows] < 0) rates.push_back(0);  // keeps the copies observable
  return median_of(rates);
}

std::vector<StridedPoint> strided_copy_curve(Communicator& self, std::size_t max_bytes) {
  std::vector<StridedPoint> curve;
  for (std::size_t bytes = 64u << 10; bytes <= max_bytes; bytes *= 8) {
    // A matrix twice as tall as wide, its rows an odd number of elements long (rows a power
    // of two long share cache sets: several times slower, a case the curve does not model),
    // scattered by columns to this rank alone and gathered back.
    const auto elements = static_cast<double>(bytes / sizeof(double));
    const std::size_t width = static_cast<std::size_t>(std::sqrt(elements / 2)) | 1;
    const std::size_t rows = bytes / sizeof(double) / width;
    const RowMajor shape{rows, width};
    std::vector<double> matrix(rows * width, 1.0), block(rows * width, 0.0);
    const std::size_t counts[] = {width};
    // Small blocks take microseconds: repeated for some 16 MiB of copying.
    const std::size_t repeats = std::max<std::size_t>(3, (16u << 20) / bytes);
    std::vector<double> rates;
    for (std::size_t i = 0; i < repeats; ++i) {
      const auto t = Clock::now();
      self.scatterv_columns(matrix, shape, counts, block, 0);
      self.gatherv_columns(block, matrix, shape, counts, 0);
      rates.push_back(static_cast<double>(2 * matrix.size() * sizeof(double)) / since(t));
    }
    curve.push_back({matrix.size() * sizeof(double), median_of(rates)});
  }
  return curve;
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

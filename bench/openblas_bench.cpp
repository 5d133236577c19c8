// The ideal on one machine: single-process OpenBLAS dgemm (n x n x n) with T threads, cold
// (fresh C + one multiply) and warm (REPEATS multiplies into the same C).
// Prints one CSV row: openblas,single,T,n,cold_s,median_s,min_s,max_s,gflops,gflops_min,gflops_max
#include <algorithm>
#include <armadillo>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "distmm/blas.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: openblas_bench N THREADS REPEATS\n");
    return 2;
  }
  const auto n = static_cast<arma::uword>(std::atol(argv[1]));
  const int threads = std::atoi(argv[2]), repeats = std::atoi(argv[3]);
  distmm::set_blas_threads(threads);
  arma::arma_rng::set_seed(1);
  const arma::mat a(n, n, arma::fill::randu), b(n, n, arma::fill::randu);
  const auto since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // Cold, as a one-shot user pays for it: a fresh C (new pages, first touched by the gemm)
  // and one multiply. (arma::mat c(n, n) would zero C outside the timed region.)
  auto start = std::chrono::steady_clock::now();
  arma::mat c = a * b;
  const double cold = since(start);
  std::vector<double> times;
  for (int run = 0; run < repeats; ++run) {  // warm: the same C again
    start = std::chrono::steady_clock::now();
    c = a * b;
    times.push_back(since(start));
  }
  std::sort(times.begin(), times.end());
  const double flops = 2.0 * double(n) * double(n) * double(n), med = times[times.size() / 2];
  std::printf("openblas,single,%d,%llu,%.6f,%.6f,%.6f,%.6f,%.3f,%.3f,%.3f,,,\n", threads,
              static_cast<unsigned long long>(n), cold, med, times.front(), times.back(),
              flops / med / 1e9, flops / times.back() / 1e9, flops / times.front() / 1e9);
  return 0;
}

// Times distmm's strategies the way the benchmark script needs: per strategy, one cold run
// and R warm runs of the distributed multiply, on the MPI backend (under mpirun) or the
// simulator (--ranks N). Rank 0 prints one CSV row per strategy:
//   method,backend,ranks,n,cold_s,median_s,min_s,max_s,gflops,gflops_min,gflops_max,
//   outside_gemm,peak_param_bytes,shard_bytes
// outside_gemm: share of rank 0's median run spent outside its local multiplies.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "distmm/blas.hpp"
#include "distmm/mpi_session.hpp"
#include "distmm/sharding.hpp"
#include "distmm/simulator.hpp"
#include "distmm/strategy.hpp"

namespace {

using namespace distmm;

struct Config {
  std::size_t n = 1024;
  int repeats = 5;
  int ranks = 0;  // simulator when > 0
  std::vector<Strategy> strategies;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(Communicator& comm, const Config& c) {
  const MatmulShape shape{c.n, c.n, c.n};
  arma::mat a, b;
  if (comm.rank() == 0) {
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> u(-1, 1);
    a.set_size(c.n, c.n);
    b.set_size(c.n, c.n);
    a.imbue([&] { return u(rng); });
    b.imbue([&] { return u(rng); });
  }
  for (Strategy s : c.strategies) {
    std::vector<double> times, outside;
    double cold = 0;
    std::uint64_t peak = 0;
    for (int run = 0; run <= c.repeats; ++run) {
      comm.barrier();
      comm.stats().reset();
      const auto start = std::chrono::steady_clock::now();
      matmul(s, comm, shape, a, b, 0);
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (run == 0) {
        cold = t;
        continue;
      }
      times.push_back(t);
      outside.push_back(1.0 - comm.stats().op(OpKind::compute).seconds / t);
      peak = comm.stats().peak_param_bytes();
    }
    if (comm.rank() != 0) continue;
    const double med = median(times);
    const double lo = *std::min_element(times.begin(), times.end());
    const double hi = *std::max_element(times.begin(), times.end());
    const double shard = static_cast<double>(shard_of(c.n, comm.size(), 0).count * c.n * 8);
    std::printf("%s,%s,%d,%zu,%.6f,%.6f,%.6f,%.6f,%.3f,%.3f,%.3f,%.4f,%llu,%.0f\n",
                std::string(name_of(s)).c_str(), comm.backend().c_str(), comm.size(), c.n, cold,
                med, lo, hi, shape.flops() / med / 1e9, shape.flops() / hi / 1e9,
                shape.flops() / lo / 1e9, median(outside), static_cast<unsigned long long>(peak),
                shard);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Keep freed buffers in the heap so warm runs reuse memory instead of faulting fresh pages.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, -1);
  CLI::App app{"distmm_bench: cold and warm timings of distmm's strategies"};
  Config c;
  std::string strategy = "all";
  app.add_option("--n", c.n, "m = k = n")->capture_default_str();
  app.add_option("--repeats", c.repeats, "warm runs after the cold one")->capture_default_str();
  app.add_option("--ranks", c.ranks, "simulator ranks (default: MPI backend)");
  app.add_option("--strategy", strategy, "dp | fsdp | fsdp-overlap | all")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  c.strategies =
      strategy == "all" ? all_strategies() : std::vector<Strategy>{*parse_strategy(strategy)};
  if (c.ranks > 0) {
    set_blas_threads(blas_threads_for(c.ranks));
    run_simulated(c.ranks, [&](Communicator& comm) { bench(comm, c); });
    return 0;
  }
  MpiSession session(argc, argv);
  set_blas_threads(blas_threads_for(session.ranks_on_this_host()));
  auto world = session.world();
  bench(*world, c);
  return 0;
}

// The baseline distmm's strategies race: a straightforward hand-written DP / FSDP on raw MPI,
// n x n doubles, row-major buffers allocated once, MPI_IN_PLACE at the root, one
// cblas_dgemm per rank. DP: MPI_Scatterv A, MPI_Bcast B, multiply, MPI_Gatherv C.
// FSDP: B's column shards placed once (untimed, as distmm's setup), then per execution
// MPI_Scatterv A, MPI_Allgatherv B (row-major B^T rows = B's columns), multiply, MPI_Gatherv C.
// Run under mpirun; rank 0 prints one CSV row (cold = first execution, then REPEATS warm):
//   raw-STRATEGY,mpi,P,n,cold_s,median_s,min_s,max_s,gflops,gflops_min,gflops_max
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "distmm/sharding.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  if (argc != 4 || (std::strcmp(argv[1], "dp") != 0 && std::strcmp(argv[1], "fsdp") != 0)) {
    if (rank == 0) std::fprintf(stderr, "usage: raw_mpi_bench dp|fsdp N REPEATS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const bool dp = std::strcmp(argv[1], "dp") == 0;
  const auto n = static_cast<std::size_t>(std::atol(argv[2]));
  const int repeats = std::atoi(argv[3]);
  const distmm::Shard mine = distmm::shard_of(n, p, rank);
  std::vector<int> counts, displs;
  for (int r = 0; r < p; ++r) {
    const distmm::Shard s = distmm::shard_of(n, p, r);
    counts.push_back(static_cast<int>(s.count * n));
    displs.push_back(static_cast<int>(s.offset * n));
  }
  const bool root = rank == 0;
  // Row-major: the root holds all of A and C, the others their rows; B is n x n row-major,
  // with FSDP's shard (columns of B = rows of B^T) kept as rows of Bt.
  std::vector<double> a(root ? n * n : mine.count * n), c(root ? n * n : mine.count * n);
  std::vector<double> b(n * n), shard(dp ? 0 : mine.count * n);
  if (root) {
    for (std::size_t i = 0; i < n * n; ++i) {
      a[i] = static_cast<double>((i * 7) % 13) - 6;
      b[i] = static_cast<double>((i * 5) % 11) - 5;
    }
  }
  if (!dp) {  // placement of the parameter shards: rows of B^T (B is transposed once here)
    std::vector<double> bt(root ? n * n : 0);
    for (std::size_t i = 0; root && i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) bt[j * n + i] = b[i * n + j];
    }
    MPI_Scatterv(bt.data(), counts.data(), displs.data(), MPI_DOUBLE, shard.data(),
                 static_cast<int>(shard.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  std::vector<double> times;
  for (int run = 0; run <= repeats; ++run) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    const int rows = static_cast<int>(mine.count), nn = static_cast<int>(n);
    MPI_Scatterv(a.data(), counts.data(), displs.data(), MPI_DOUBLE,
                 root ? MPI_IN_PLACE : static_cast<void*>(a.data()),
                 counts[static_cast<std::size_t>(rank)], MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (dp) {
      MPI_Bcast(b.data(), nn * nn, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, nn, nn, 1.0,
                  a.data() + (root ? mine.offset * n : 0), nn, b.data(), nn, 0.0,
                  c.data() + (root ? mine.offset * n : 0), nn);
    } else {
      // b holds B^T after the all-gather: C_r = A_r (B^T)^T.
      MPI_Allgatherv(shard.data(), counts[static_cast<std::size_t>(rank)], MPI_DOUBLE, b.data(),
                     counts.data(), displs.data(), MPI_DOUBLE, MPI_COMM_WORLD);
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nn, nn, 1.0,
                  a.data() + (root ? mine.offset * n : 0), nn, b.data(), nn, 0.0,
                  c.data() + (root ? mine.offset * n : 0), nn);
    }
    MPI_Gatherv(root ? MPI_IN_PLACE : c.data(), counts[static_cast<std::size_t>(rank)], MPI_DOUBLE,
                c.data(), counts.data(), displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    times.push_back(MPI_Wtime() - start);
  }
  if (root) {
    const double cold = times.front();
    std::vector<double> warm(times.begin() + 1, times.end());
    std::sort(warm.begin(), warm.end());
    const double flops = 2.0 * double(n) * double(n) * double(n), med = warm[warm.size() / 2];
    std::printf("raw-%s,mpi,%d,%zu,%.6f,%.6f,%.6f,%.6f,%.3f,%.3f,%.3f\n", argv[1], p, n, cold, med,
                warm.front(), warm.back(), flops / med / 1e9, flops / warm.back() / 1e9,
                flops / warm.front() / 1e9);
  }
  MPI_Finalize();
  return 0;
}

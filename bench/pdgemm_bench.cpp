// The reference distributed GEMM: ScaLAPACK's PDGEMM (Debian libscalapack-openmpi) on a
// PR x PC process grid with NB x NB blocks, C = A B for n x n matrices, one BLAS thread per
// process. Run under mpirun -np PR*PC. Times the PDGEMM call only (after a barrier), one cold
// call and REPEATS warm ones; rank 0 prints one CSV row:
//   pdgemm-nbNB,mpi,P,n,cold_s,median_s,min_s,max_s,gflops,gflops_min,gflops_max
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "distmm/blas.hpp"

extern "C" {
void Cblacs_pinfo(int* mypnum, int* nprocs);
void Cblacs_get(int context, int request, int* value);
void Cblacs_gridinit(int* context, const char* order, int nprow, int npcol);
void Cblacs_gridinfo(int context, int* nprow, int* npcol, int* myrow, int* mycol);
void Cblacs_gridexit(int context);
int numroc_(const int* n, const int* nb, const int* iproc, const int* isrcproc, const int* nprocs);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb,
               const int* irsrc, const int* icsrc, const int* ictxt, const int* lld, int* info);
void pdgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
             const double* alpha, const double* a, const int* ia, const int* ja, const int* desca,
             const double* b, const int* ib, const int* jb, const int* descb, const double* beta,
             double* c, const int* ic, const int* jc, const int* descc);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 6) {
    std::fprintf(stderr, "usage: pdgemm_bench N NB PR PC REPEATS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int n = std::atoi(argv[1]), nb = std::atoi(argv[2]), pr = std::atoi(argv[3]),
            pc = std::atoi(argv[4]), repeats = std::atoi(argv[5]);
  distmm::set_blas_threads(1);
  int me = 0, procs = 0, ctx = 0, myrow = 0, mycol = 0, zero = 0, one = 1, info = 0;
  Cblacs_pinfo(&me, &procs);
  Cblacs_get(-1, 0, &ctx);
  Cblacs_gridinit(&ctx, "Row", pr, pc);
  int rows = 0, cols = 0;
  Cblacs_gridinfo(ctx, &rows, &cols, &myrow, &mycol);
  const int local_rows = numroc_(&n, &nb, &myrow, &zero, &pr);
  const int local_cols = numroc_(&n, &nb, &mycol, &zero, &pc);
  const int lld = std::max(1, local_rows);
  int desc[9];
  descinit_(desc, &n, &n, &nb, &nb, &zero, &zero, &ctx, &lld, &info);
  std::vector<double> a(static_cast<std::size_t>(local_rows) *
                        static_cast<std::size_t>(local_cols)),
      b(a.size()), c(a.size());
  std::mt19937_64 rng(static_cast<std::uint64_t>(me) + 1);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto* v : {&a, &b}) {
    for (double& x : *v) x = u(rng);
  }
  const double alpha = 1.0, beta = 0.0;
  std::vector<double> times;
  double cold = 0;
  for (int run = 0; run <= repeats; ++run) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    pdgemm_("N", "N", &n, &n, &n, &alpha, a.data(), &one, &one, desc, b.data(), &one, &one, desc,
            &beta, c.data(), &one, &one, desc);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = MPI_Wtime() - start;
    if (run == 0) {
      cold = t;
    } else {
      times.push_back(t);
    }
  }
  if (me == 0) {
    std::sort(times.begin(), times.end());
    const double flops = 2.0 * n * double(n) * n, med = times[times.size() / 2];
    std::printf("pdgemm-nb%d,mpi,%d,%d,%.6f,%.6f,%.6f,%.6f,%.3f,%.3f,%.3f,,,\n", nb, procs, n, cold,
                med, times.front(), times.back(), flops / med / 1e9, flops / times.back() / 1e9,
                flops / times.front() / 1e9);
  }
  Cblacs_gridexit(ctx);
  MPI_Finalize();
  return 0;
}

#include "distmm/blas.hpp"

#include <algorithm>
#include <thread>

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace distmm {

void set_blas_threads(int threads) {
  openblas_set_num_threads(std::max(1, threads));
}

int blas_threads() {
  return openblas_get_num_threads();
}

int blas_threads_for(int ranks_here) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, ranks_here));
}

}  // namespace distmm

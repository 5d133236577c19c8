#pragma once
// The BLAS (OpenBLAS) thread count, process-wide.

namespace distmm {

// Sets how many threads each BLAS call may use (at least 1).
void set_blas_threads(int threads);
int blas_threads();

// Threads per BLAS call for `ranks_here` ranks sharing this machine's cores: the cores split
// evenly, one thread per rank once ranks >= cores, so ranks never fight over cores.
int blas_threads_for(int ranks_here);

}  // namespace distmm

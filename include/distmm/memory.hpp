#pragma once
// Fresh memory, paid for once and up front.
//
// The first touch of an anonymous page traps into the kernel; on virtual machines such as
// ours each trap costs about 12-19 us per 4 KiB page (0.2-0.3 GB/s), so a buffer first
// written by a multiply or a receive slows it down by more than the work itself. Asking the
// kernel to populate a whole range at once (madvise MADV_POPULATE_WRITE, Linux 5.14) and
// then writing once per page costs about half of that, and pays it where it belongs: plans
// allocate every buffer through fresh_matrix() at setup, so executing a plan touches no
// fresh memory.
#include <armadillo>
#include <cstddef>
#include <cstdint>

namespace distmm {

// Bytes of memory this process may still use: the kernel's MemAvailable, lowered to what the
// memory limits of its cgroup and the cgroup's ancestors leave (v1 or v2), when set.
std::uint64_t available_memory();

// Populates the pages of [data, data + bytes) (writable private memory) and writes one byte
// of each, so that later touches cost nothing extra; contents are kept.
void prefault(void* data, std::size_t bytes);

// A rows x cols matrix whose memory is populated (contents unspecified).
template <typename T>
arma::Mat<T> fresh_matrix(std::size_t rows, std::size_t cols) {
  arma::Mat<T> x(rows, cols, arma::fill::none);
  prefault(x.memptr(), x.n_elem * sizeof(T));
  return x;
}

// A rows x cols matrix with no memory behind it, for a dry run (dry_run.hpp): Armadillo keeps
// the size of a matrix over memory it does not own and never reads it unless asked to.
template <typename T>
arma::Mat<T> no_memory_matrix(std::size_t rows, std::size_t cols) {
  return arma::Mat<T>(static_cast<T*>(nullptr), rows, cols, false, true);
}

// Makes the C library keep freed memory for reuse instead of returning it to the kernel
// (glibc: no mmap of its own for large blocks, no trimming of the heap). MPI libraries
// allocate and free temporaries inside collectives (Open MPI's non-blocking reduce: about
// 1.5 times the message per call); with this, the second call reuses the first call's pages
// instead of faulting fresh ones in (measured: MPI_Ireduce of 2 MiB on 3 ranks, 769 faults
// per call on a non-root rank without it, 0 with it). Process-wide: MpiSession calls it,
// and so does the distmm program.
void retain_freed_memory();

// Minor page faults so far: of the whole process, or of the calling thread only (Linux's
// RUSAGE_THREAD, for ranks that are threads of one process).
std::uint64_t minor_page_faults(bool this_thread_only);

}  // namespace distmm

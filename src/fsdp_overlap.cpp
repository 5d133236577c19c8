#include "distmm/fsdp_overlap.hpp"

#include <exception>
#include <thread>

#include "distmm/sharding.hpp"
#include "fsdp_frame.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
arma::Mat<T> fsdp_overlap_matmul_rows(Communicator& comm, const arma::Mat<T>& a_rows,
                                      const ParameterShard<T>& shard) {
  const int p = comm.size(), r = comm.rank();
  const std::size_t k = shard.k, n = shard.n;
  check_operand(a_rows, a_rows.n_rows, k, "fsdp_overlap: rows of A", r);
  arma::Mat<T> c_rows(a_rows.n_rows, n);
  const std::size_t widest = shard_of(n, p, 0).count;
  // Two ring buffers of the widest shard; step 0 multiplies the rank's own shard in place.
  const std::size_t ring_buffers = p > 2 ? 2 : (p == 2 ? 1 : 0);
  std::vector<T> buffers[2] = {std::vector<T>(ring_buffers > 0 ? k * widest : 0),
                               std::vector<T>(ring_buffers > 1 ? k * widest : 0)};
  const ParameterHold ring(comm.stats(), ring_buffers * k * widest * sizeof(T), false);

  const T* current = shard.columns.memptr();
  for (int t = 0; t < p; ++t) {
    const int owner = ((r - t) % p + p) % p;  // whose shard `current` is
    const Shard cols = shard_of(n, p, owner);
    // The multiply runs on a helper thread while this thread moves the next shard.
    const arma::Mat<T> b_part(const_cast<T*>(current), k, cols.count, false, true);
    arma::Mat<T> c_part(cols.count && !c_rows.is_empty() ? c_rows.colptr(cols.offset) : nullptr,
                        a_rows.n_rows, cols.count, false, true);
    TraceEvent multiply;
    std::exception_ptr failure;
    std::thread worker([&] {
      try {
        multiply = timed_multiply(comm.stats(), c_part, a_rows, b_part);
      } catch (...) {
        failure = std::current_exception();
      }
    });
    const T* next = current;
    if (t + 1 < p) {
      // From the ring predecessor arrives the shard of rank (r - t - 1) mod P.
      const int incoming_owner = ((r - t - 1) % p + p) % p;
      std::vector<T>& into = buffers[t % 2 == 0 ? 0 : (ring_buffers > 1 ? 1 : 0)];
      const std::size_t incoming = k * shard_of(n, p, incoming_owner).count;
      try {
        comm.sendrecv(std::span<const T>(current, k * cols.count), (r + 1) % p, t,
                      std::span<T>(into.data(), incoming), (r + p - 1) % p, t);
      } catch (...) {
        worker.join();
        throw;
      }
      next = into.data();
    }
    worker.join();
    if (failure) std::rethrow_exception(failure);
    record_multiply(comm.stats(), multiply);
    current = next;
  }
  return c_rows;
}

template <Element T>
arma::Mat<T> fsdp_overlap_matmul(Communicator& comm, const MatmulShape& shape,
                                 const arma::Mat<T>& a, const arma::Mat<T>& b, int root) {
  return sharded_matmul(comm, shape, a, b, root, "fsdp_overlap_matmul",
                        [&](const arma::Mat<T>& a_rows, const ParameterShard<T>& shard) {
                          return fsdp_overlap_matmul_rows(comm, a_rows, shard);
                        });
}

#define DISTMM_INSTANTIATE(T)                                                               \
  template arma::Mat<T> fsdp_overlap_matmul(Communicator&, const MatmulShape&,              \
                                            const arma::Mat<T>&, const arma::Mat<T>&, int); \
  template arma::Mat<T> fsdp_overlap_matmul_rows(Communicator&, const arma::Mat<T>&,        \
                                                 const ParameterShard<T>&);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm

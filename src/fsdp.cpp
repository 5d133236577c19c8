#include "distmm/fsdp.hpp"

#include "distmm/row_exchange.hpp"
#include "distmm/sharding.hpp"
#include "fsdp_frame.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
ParameterShard<T> shard_parameters(Communicator& comm, const arma::Mat<T>& b, std::size_t k,
                                   std::size_t n, int root) {
  const auto counts = scaled(shard_counts(n, comm.size()), k);
  ParameterShard<T> shard{k, n, arma::Mat<T>(k, shard_of(n, comm.size(), comm.rank()).count)};
  if (comm.rank() == root) check_operand(b, k, n, "shard_parameters: B", comm.rank());
  // A column shard of column-major B is contiguous: B's storage is the scatterv buffer.
  comm.scatterv(b, counts, shard.columns, root);
  return shard;
}

template <Element T>
arma::Mat<T> gather_parameters(Communicator& comm, const ParameterShard<T>& shard) {
  const auto counts = scaled(shard_counts(shard.n, comm.size()), shard.k);
  arma::Mat<T> full(shard.k, shard.n);
  comm.allgatherv(shard.columns, full, counts);
  return full;
}

template <Element T>
arma::Mat<T> fsdp_matmul_rows(Communicator& comm, const arma::Mat<T>& a_rows,
                              const ParameterShard<T>& shard) {
  // The gathered B lives only for this multiply.
  const arma::Mat<T> full_b = gather_parameters(comm, shard);
  const ParameterHold gathered = hold(comm, full_b, false);
  return local_multiply(comm, a_rows, full_b);
}

template <Element T>
arma::Mat<T> fsdp_matmul(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                         const arma::Mat<T>& b, int root) {
  return sharded_matmul(comm, shape, a, b, root, "fsdp_matmul",
                        [&](const arma::Mat<T>& a_rows, const ParameterShard<T>& shard) {
                          return fsdp_matmul_rows(comm, a_rows, shard);
                        });
}

#define DISTMM_INSTANTIATE(T)                                                                  \
  template ParameterShard<T> shard_parameters(Communicator&, const arma::Mat<T>&, std::size_t, \
                                              std::size_t, int);                               \
  template arma::Mat<T> gather_parameters(Communicator&, const ParameterShard<T>&);            \
  template arma::Mat<T> fsdp_matmul_rows(Communicator&, const arma::Mat<T>&,                   \
                                         const ParameterShard<T>&);                            \
  template arma::Mat<T> fsdp_matmul(Communicator&, const MatmulShape&, const arma::Mat<T>&,    \
                                    const arma::Mat<T>&, int);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm

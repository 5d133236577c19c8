#pragma once
// The frame both FSDP variants share: shard B by columns, scatter A's rows, compute the
// rank's rows of C with `rows(a_rows, shard)`, gather C to the root.
#include "distmm/fsdp.hpp"
#include "distmm/row_exchange.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T, typename Rows>
arma::Mat<T> sharded_matmul(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                            const arma::Mat<T>& b, int root, const char* caller, Rows&& rows) {
  if (comm.size() == 1) return single_rank_multiply(comm, shape, a, b, caller);
  const ParameterShard<T> shard = shard_parameters(comm, b, shape.k, shape.n, root);
  const ParameterHold params = hold(comm, shard.columns, true);
  const arma::Mat<T> a_rows = scatter_rows(comm, a, shape.m, shape.k, root);
  const arma::Mat<T> c_rows = rows(a_rows, shard);
  return gather_rows(comm, c_rows, shape.m, shape.n, root);
}

}  // namespace distmm

#include "distmm/dp.hpp"

#include "distmm/row_exchange.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
arma::Mat<T> dp_matmul_rows(Communicator& comm, const arma::Mat<T>& a_rows, const arma::Mat<T>& b,
                            std::size_t k, std::size_t n, int root) {
  if (comm.rank() == root) {
    check_operand(b, k, n, "dp_matmul_rows: B", comm.rank());
    // MPI_Bcast and the simulator only read the root's buffer, so B is sent in place.
    auto& source = const_cast<arma::Mat<T>&>(b);
    const ParameterHold params = hold(comm, b, true);
    comm.broadcast(source, root);
    return local_multiply(comm, a_rows, b);
  }
  arma::Mat<T> full_b(k, n);
  const ParameterHold params = hold(comm, full_b, true);
  comm.broadcast(full_b, root);
  return local_multiply(comm, a_rows, full_b);
}

template <Element T>
arma::Mat<T> dp_matmul(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& a,
                       const arma::Mat<T>& b, int root) {
  if (comm.size() == 1) return single_rank_multiply(comm, shape, a, b, "dp_matmul");
  const arma::Mat<T> a_rows = scatter_rows(comm, a, shape.m, shape.k, root);
  const arma::Mat<T> c_rows = dp_matmul_rows(comm, a_rows, b, shape.k, shape.n, root);
  return gather_rows(comm, c_rows, shape.m, shape.n, root);
}

#define DISTMM_INSTANTIATE(T)                                                                   \
  template arma::Mat<T> dp_matmul(Communicator&, const MatmulShape&, const arma::Mat<T>&,       \
                                  const arma::Mat<T>&, int);                                    \
  template arma::Mat<T> dp_matmul_rows(Communicator&, const arma::Mat<T>&, const arma::Mat<T>&, \
                                       std::size_t, std::size_t, int);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm

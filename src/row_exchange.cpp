#include "distmm/row_exchange.hpp"

#include "distmm/sharding.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
arma::Mat<T> scatter_rows(Communicator& comm, const arma::Mat<T>& full, std::size_t rows,
                          std::size_t cols, int root) {
  const int p = comm.size();
  const Shard mine = shard_of(rows, p, comm.rank());
  arma::Mat<T> local(mine.count, cols);
  const auto counts = scaled(shard_counts(rows, p), cols);
  arma::Col<T> packed;
  if (comm.rank() == root) {
    check_operand(full, rows, cols, "scatter_rows: matrix", comm.rank());
    packed.set_size(rows * cols);
    for (int r = 0; r < p; ++r) {
      const Shard s = shard_of(rows, p, r);
      if (s.count == 0) continue;
      arma::Mat<T> block(packed.memptr() + s.offset * cols, s.count, cols, false, true);
      block = full.rows(s.offset, s.offset + s.count - 1);
    }
  }
  comm.scatterv(packed, counts, local, root);
  return local;
}

template <Element T>
arma::Mat<T> gather_rows(Communicator& comm, const arma::Mat<T>& mine, std::size_t rows,
                         std::size_t cols, int root) {
  const int p = comm.size();
  check_operand(mine, shard_of(rows, p, comm.rank()).count, cols, "gather_rows: rows", comm.rank());
  const auto counts = scaled(shard_counts(rows, p), cols);
  arma::Col<T> packed(comm.rank() == root ? rows * cols : 0);
  comm.gatherv(mine, packed, counts, root);
  arma::Mat<T> full;
  if (comm.rank() != root) return full;
  full.set_size(rows, cols);
  for (int r = 0; r < p; ++r) {
    const Shard s = shard_of(rows, p, r);
    if (s.count == 0) continue;
    full.rows(s.offset, s.offset + s.count - 1) =
        arma::Mat<T>(packed.memptr() + s.offset * cols, s.count, cols, false, true);
  }
  return full;
}

template arma::Mat<double> scatter_rows(Communicator&, const arma::Mat<double>&, std::size_t,
                                        std::size_t, int);
template arma::Mat<float> scatter_rows(Communicator&, const arma::Mat<float>&, std::size_t,
                                       std::size_t, int);
template arma::Mat<double> gather_rows(Communicator&, const arma::Mat<double>&, std::size_t,
                                       std::size_t, int);
template arma::Mat<float> gather_rows(Communicator&, const arma::Mat<float>&, std::size_t,
                                      std::size_t, int);

}  // namespace distmm

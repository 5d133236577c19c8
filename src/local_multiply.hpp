#pragma once
// The local multiply every strategy ends in, with the shape checks that name the caller.
#include <armadillo>
#include <string>

#include "distmm/communicator.hpp"
#include "distmm/error.hpp"
#include "distmm/shape.hpp"

namespace distmm {

template <typename T>
void check_operand(const arma::Mat<T>& x, std::size_t rows, std::size_t cols,
                   const std::string& what, int rank) {
  if (x.n_rows != rows || x.n_cols != cols) {
    throw Error(what + " is " + std::to_string(x.n_rows) + "x" + std::to_string(x.n_cols) +
                    ", expected " + std::to_string(rows) + "x" + std::to_string(cols),
                rank, what);
  }
}

// out = a * b (out already sized, possibly a view into a larger matrix): one BLAS call
// (gemm), timed. Touches no stats, so it may run on a helper thread; record the event after.
template <typename T>
TraceEvent timed_multiply(const RankStats& stats, arma::Mat<T>& out, const arma::Mat<T>& a,
                          const arma::Mat<T>& b) {
  TraceEvent e;
  e.op = OpKind::compute;
  e.rows = a.n_rows;
  e.inner = b.n_rows;
  e.cols = b.n_cols;
  e.start_s = stats.now();
  if (!out.is_empty()) out = a * b;
  e.duration_s = stats.now() - e.start_s;
  return e;
}

inline void record_multiply(RankStats& stats, const TraceEvent& e) {
  stats.record(e, 0, 0,
               2.0 * static_cast<double>(e.rows) * static_cast<double>(e.inner) *
                   static_cast<double>(e.cols));
}

// rows x k times k x n: one BLAS call (gemm), timed into the rank's stats.
template <typename T>
arma::Mat<T> local_multiply(Communicator& comm, const arma::Mat<T>& a_rows, const arma::Mat<T>& b) {
  check_operand(a_rows, a_rows.n_rows, b.n_rows, "local multiply: rows of A", comm.rank());
  arma::Mat<T> c(a_rows.n_rows, b.n_cols);
  record_multiply(comm.stats(), timed_multiply(comm.stats(), c, a_rows, b));
  return c;
}

// Registers a matrix of parameters with the rank's memory counters while it lives.
template <typename T>
ParameterHold hold(Communicator& comm, const arma::Mat<T>& params, bool persistent) {
  return ParameterHold(comm.stats(), params.n_elem * sizeof(T), persistent);
}

// The one-rank case of every strategy: the rank holds all of B, no communication.
template <typename T>
arma::Mat<T> single_rank_multiply(Communicator& comm, const MatmulShape& shape,
                                  const arma::Mat<T>& a, const arma::Mat<T>& b,
                                  const std::string& caller) {
  check_operand(a, shape.m, shape.k, caller + ": A", 0);
  check_operand(b, shape.k, shape.n, caller + ": B", 0);
  const ParameterHold params = hold(comm, b, true);
  return local_multiply(comm, a, b);
}

}  // namespace distmm

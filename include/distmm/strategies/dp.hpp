#pragma once
// Data Parallel (DP) C = A @ B: every rank holds all of the parameters B.
//
//            rank 0            rank 1            rank 2
//   setup    B                 B                 B             bcast: every rank all of B
//   ---- each execution ----
//   scatterv A0 (stays)        A1                A2            rows of A, balanced
//   multiply C0 = A0 B         C1 = A1 B         C2 = A2 B     one BLAS call per rank
//   gatherv  C = [C0;C1;C2]    -                 -             C0 is written in place
//
// Rank r receives k n elements of B once, then m_r k of A and sends m_r n of C per
// execution; it holds k n parameter elements persistently and at its peak.
#include <armadillo>

#include "distmm/plan.hpp"
#include "distmm/stats.hpp"

namespace distmm {

template <Element T>
class DpPlan final : public RowShardedPlan<T> {
 public:
  // Broadcasts B (k x n, read on `root` only) to every rank. Collective.
  DpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b, int root = 0);
  // Allocates B; the caller fills parameters() on every rank before the first execution.
  DpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int root = 0);

  // All of B (k x n), on every rank: the parameters training updates in place.
  arma::Mat<T>& parameters() { return b_; }

 private:
  void multiply_rows(const T* a_rows_t, T* c_rows_t) override;

  arma::Mat<T> b_;
  ParameterHold held_;
};

}  // namespace distmm

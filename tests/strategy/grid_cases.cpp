// The grid strategy on every grid of the communicator's ranks, written once for both backends.
#include "strategy/grid_cases.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "distmm/dry_run.hpp"
#include "distmm/model.hpp"
#include "distmm/plan.hpp"
#include "distmm/report.hpp"
#include "strategy/formulas.hpp"
#include "strategy/layout_cases.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {
namespace {

StrategySettings grid_settings(const Grid& g, std::size_t panel) {
  return {{"grid", grid_text(g)}, {"panel", std::to_string(panel)}};
}

// C exact against A * B (integer inputs) for f64 and f32.
template <typename T>
void expect_exact(Communicator& comm, const MatmulShape& shape, const StrategySettings& settings,
                  unsigned seed) {
  const bool root = comm.rank() == 0;
  const arma::Mat<T> a = integer_matrix<T>(shape.m, shape.k, seed);
  const arma::Mat<T> b = integer_matrix<T>(shape.k, shape.n, seed + 1);
  const arma::Mat<T> c = matmul(strategy("grid"), comm, shape, root ? a : arma::Mat<T>{},
                                root ? b : arma::Mat<T>{}, 0, settings);
  if (root) {
    EXPECT_TRUE(arma::approx_equal(c, arma::Mat<T>(a * b), "absdiff", T(0)))
        << shape << (sizeof(T) == 4 ? " f32" : " f64");
  }
}

// The counters, the multiplies and the allocation equal grid_formulas.cpp's; the dry run's
// events equal the real run's.
void expect_formulas(Communicator& comm, const Grid& g, const MatmulShape& shape,
                     std::size_t panel) {
  const bool root = comm.rank() == 0;
  const StrategySettings settings = grid_settings(g, panel);
  const arma::mat a_t = root ? integer_matrix<double>(shape.k, shape.m, 5) : arma::mat{};
  const arma::mat b = root ? integer_matrix<double>(shape.k, shape.n, 6) : arma::mat{};
  arma::mat c_t(root ? shape.n : 0, root ? shape.m : 0);
  comm.barrier();
  comm.stats().reset();
  const auto plan = make_plan(strategy("grid"), comm, shape, b, 0, settings);
  plan->execute(a_t, c_t);
  const RankFigures got = measured(comm, sizeof(double));
  RankFigures want =
      expected_grid_figures(g, shape, comm.size(), comm.rank(), sizeof(double), panel);
  want.comm_s = got.comm_s;
  want.compute_s = got.compute_s;
  EXPECT_EQ(got, want) << "rank " << comm.rank() << ": sent " << got.bytes_sent << " (want "
                       << want.bytes_sent << "), received " << got.bytes_received << " (want "
                       << want.bytes_received << "), messages " << got.messages_sent << "/"
                       << got.messages_received << " (want " << want.messages_sent << "/"
                       << want.messages_received << "), params " << got.persistent_param_bytes
                       << "/" << got.peak_param_bytes << " (want " << want.persistent_param_bytes
                       << "/" << want.peak_param_bytes << ")";
  EXPECT_EQ(comm.stats().op(OpKind::compute).calls,
            expected_grid_multiplies(g, shape, comm.rank(), panel));
  EXPECT_EQ(plan->allocated_bytes(),
            expected_grid_allocation(g, shape, comm.rank(), sizeof(double), panel));
  expect_planned_events(comm, comm.stats().events(),
                        planned_events(strategy("grid"), shape, comm.size(), 8, settings, 1),
                        "grid " + grid_text(g));
}

}  // namespace

void grid_every_grid(Communicator& comm, int most_grids) {
  const int p = comm.size();
  int others = 0;
  for (int pm = 1; pm <= p; ++pm) {
    for (int pn = 1; pm * pn <= p; ++pn) {
      for (int pk = 1; pm * pn * pk <= p; ++pk) {
        // The grids of all the ranks, and `most_grids` of fewer (idle ranks).
        if (pm * pn * pk < p && others++ >= most_grids) continue;
        const Grid g{pm, pn, pk};
        SCOPED_TRACE("grid " + grid_text(g) + " on " + std::to_string(p) + " ranks");
        // Uneven blocks cut into panels of 2, a side longer than a dimension, f32.
        expect_exact<double>(comm, {13, 17, 6}, grid_settings(g, 2), 30);
        expect_exact<double>(comm, {2, 3, 1}, grid_settings(g, kDefaultPanel), 32);
        expect_exact<float>(comm, {11, 7, 5}, grid_settings(g, kDefaultPanel), 34);
        expect_formulas(comm, g, {7, 5, 3}, 2);
        // The distributed layout: each rank's own blocks in and out.
        distributed_exact<double>(comm, strategy("grid"), grid_settings(g, 2), {13, 17, 6}, 36);
        distributed_exact<float>(comm, strategy("grid"), grid_settings(g, kDefaultPanel), {2, 3, 1},
                                 38);
      }
    }
  }
}

}  // namespace distmm::testing

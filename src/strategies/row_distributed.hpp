#pragma once
// The row-sharded plans under the distributed layout (layout.hpp): rank r starts with A's
// rows R_r and B's columns N_r and ends with C's rows R_r, so an execution is the plan's own
// rows path (RowShardedPlan::execute_rows) with B's columns in place as its shard: nothing of
// A or C moves, and B's columns are gathered as the strategy gathers them.
#include <algorithm>
#include <armadillo>
#include <memory>

#include "distmm/layout.hpp"
#include "distmm/plan.hpp"
#include "distmm/strategy_of.hpp"
#include "local_multiply.hpp"

namespace distmm {

// Plan: a RowShardedPlan with a constructor (comm, shape, Unplaced) and shard(), B's columns
// shard_of(n, P, r) (k x n_r).
template <Element T, class Plan>
class RowDistributedPlan final : public DistributedPlan<T> {
 public:
  RowDistributedPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block)
      : DistributedPlan<T>(comm, shape, row_sharded_blocks(shape, comm.size(), comm.rank())),
        plan_(comm, shape, unplaced) {
    const Block& b = this->blocks().b;
    check_operand(b_block, b.rows, b.cols, "B's block", comm.rank());
    if (!comm.stats().dry()) std::copy(b_block.begin(), b_block.end(), plan_.shard().begin());
    this->count_allocated(plan_.allocated_bytes());
  }
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override {
    this->check_blocks(a_t, c_t);
    plan_.execute_rows(a_t.memptr(), c_t.memptr());
  }

 private:
  Plan plan_;
};

}  // namespace distmm

namespace distmm {

template <template <class> class Plan, Element T>
std::unique_ptr<DistributedPlan<T>> row_distributed_plan(Communicator& comm,
                                                         const MatmulShape& shape,
                                                         const arma::Mat<T>& b_block) {
  return std::make_unique<RowDistributedPlan<T, Plan<T>>>(comm, shape, b_block);
}

// A row-sharded strategy (dp, fsdp, fsdp-overlap): StrategyOf<Derived> with the distributed
// layout's blocks and plan, its execution by a Plan<T> (see RowDistributedPlan).
template <class Derived, template <class> class Plan>
class RowShardedStrategy : public StrategyOf<Derived> {
 public:
  std::optional<BlockLayout> distributed_blocks(const MatmulShape& shape, int ranks, int rank,
                                                const StrategySettings&) const override {
    return row_sharded_blocks(shape, ranks, rank);
  }
  template <Element T>
  std::unique_ptr<DistributedPlan<T>> make_distributed_plan(Communicator& comm,
                                                            const MatmulShape& shape,
                                                            const arma::Mat<T>& b_block,
                                                            const StrategySettings&) const {
    return row_distributed_plan<Plan>(comm, shape, b_block);
  }
};

}  // namespace distmm

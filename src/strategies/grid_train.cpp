// The grid's training step (train --strategy grid): a linear layer's 2-D tensor parallelism
// on a PM x PN grid (Optimus, Xu et al. 2021), every product by SUMMA over the plan's panels.
//
// Rank (i, j) holds X(R_i, its part of K) as the plan's A, W(its part of K, N_j) as its B (W^T
// block, n_j x k_i), and T(R_i, N_j). Per step:
//   forward   Y_ij = X(R_i, :) W(:, N_j): the plan's SUMMA;
//   residual  R_ij = (Y_ij - T_ij) / m, local, and its part of the loss;
//   backward  for each panel of K, the same broadcasts as the forward, then
//             dW(panel, N_j)^T = R_ij^T X(R_i, panel), reduced along grid column j onto the
//             panel's B owner, and dX(R_i, panel) = R_ij W(panel, N_j)^T, reduced along grid
//             row i onto the panel's A owner;
//   update    the optimizer on the rank's W^T block (elementwise, so transposed is as good).
// So a rank moves the forward's panels twice and the reduced panels once a step; no rank ever
// holds more than its blocks and two pairs of panels. Checkpoints save each rank's block of W
// (rows: its part of K, columns N_j), transposed at the save; ranks beyond the grid are idle.
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/strategies/grid.hpp"
#include "local_multiply.hpp"
#include "part_view.hpp"
#include "strategies/builtin.hpp"

namespace distmm {

template <Element T>
class GridStep final : public TrainingStep<T> {
 public:
  GridStep(const TrainingSetup<T>& s, const Grid& grid, std::size_t panel)
      : TrainingStep<T>(s.comm),
        comm_(s.comm),
        m_(s.shape.m),
        plan_(s.resuming
                  ? std::make_unique<GridPlan<T>>(s.comm, s.shape, unplaced, grid, panel, s.root)
                  : std::make_unique<GridPlan<T>>(s.comm, s.shape, s.w0, grid, panel, s.root)),
        gradient_t_(this->memory().template matrix<T>(plan_->cols_.count, plan_->b_part_.count)),
        gradient_hold_(hold(s.comm, gradient_t_, true)),
        optimizer_(s.config, plan_->cols_.count, plan_->b_part_.count, this->memory()),
        state_hold_(s.comm.stats(), optimizer_.bytes(), true),
        loss_(1) {
    GridPlan<T>& p = *plan_;
    const std::size_t mi = p.rows_.count, nj = p.cols_.count;
    std::size_t widest = 0;
    for (const auto& panel_at : p.panels_) widest = std::max(widest, panel_at.width);
    t_block_ = this->memory().template matrix<T>(mi, nj);
    input_grad_ = this->memory().template matrix<T>(mi, p.a_part_.count);
    // Panels of the gradients a rank adds to another's: only where the grid row (column) has
    // several ranks.
    if (grid.pm > 1) partial_g_ = this->memory().template matrix<T>(nj, widest);
    if (grid.pn > 1) partial_x_ = this->memory().template matrix<T>(mi, widest);
    p.scatter_a(s.x_t);  // X's parts: the plan's A, placed once
    scatter_t(s.t_t);
    this->count_plan(p);
    this->count_optimizer_state(optimizer_.bytes());
  }

  double step() override {
    GridPlan<T>& p = *plan_;
    RankStats& stats = comm_.stats();
    loss_[0] = 0;
    if (!p.idle()) {
      p.summa(nullptr);  // Y_ij into the plan's C block
      if (!stats.dry()) {
        arma::Mat<T>& r = p.c_block_;
        r -= t_block_;
        loss_[0] = 0.5 * static_cast<double>(arma::accu(arma::square(r))) / static_cast<double>(m_);
        r /= static_cast<T>(m_);
      }
      backward();
    }
    comm_.allreduce_sum(loss_);
    if (!p.idle()) optimizer_.step(p.bt_part_, gradient_t_);
    return loss_[0];
  }

  // W's block (the rank's part of K, N_j) and its optimizer state, in W's orientation: copies
  // made at the save (a save is not a step).
  SavedBlocks<T> saved() override {
    std::vector<arma::Mat<T>*> held = with_state(plan_->bt_part_, optimizer_);
    saved_.resize(held.size());
    std::vector<arma::Mat<T>*> out;
    for (std::size_t x = 0; x < held.size(); ++x) {
      // Armadillo's transpose of an empty matrix reads a null pointer.
      if (!comm_.stats().dry() && held[x]->n_elem > 0) saved_[x] = held[x]->t();
      out.push_back(&saved_[x]);
    }
    return {out, plan_->cols_, 0, inner_rows()};
  }

  std::uint64_t load(const Checkpoint& checkpoint) override {
    GridPlan<T>& p = *plan_;
    std::vector<arma::Mat<T>*> held = with_state(p.bt_part_, optimizer_);
    saved_.resize(held.size());
    std::vector<T*> into;
    for (arma::Mat<T>& m : saved_) {
      m.set_size(p.b_part_.count, p.cols_.count);
      into.push_back(m.memptr());
    }
    const Shard rows = inner_rows();
    const std::uint64_t read = load_block<T>(
        comm_, checkpoint, Block{rows.offset, rows.count, p.cols_.offset, p.cols_.count}, into);
    for (std::size_t x = 0; x < held.size(); ++x) {
      if (saved_[x].n_elem > 0) *held[x] = saved_[x].t();
    }
    optimizer_.set_steps_taken(checkpoint.meta.step);
    return read;
  }

  // W's block column j is W^T's rows N_j, row-major (n_j x k): the inverse of placing it.
  arma::Mat<T> gather_parameters() override {
    GridPlan<T>& p = *plan_;
    const MatmulShape& s = p.shape();
    const bool at_root = comm_.rank() == p.root();
    arma::Mat<T> w(at_root ? s.k : 0, at_root ? s.n : 0);
    for (int j = 0; j < p.grid_.pn; ++j) {
      const Shard cols = shard_of(s.n, p.grid_.pn, j);
      if (cols.count == 0 || s.k == 0) continue;
      const bool mine = !p.idle() && j == p.j_;
      const arma::Mat<T> from = part(p.bt_part_.memptr(), 0, mine ? p.bt_part_.n_elem : 0);
      arma::Mat<T> into = part(w.memptr(), cols.offset * s.k, at_root ? cols.count * s.k : 0);
      comm_.gatherv_columns(from, into, RowMajor{cols.count, s.k}, p.inner_counts(false, j),
                            p.root());
    }
    return w;
  }

  std::size_t data_rows() const override { return plan_->idle() ? 0 : plan_->rows_.count; }

 private:
  // The rows of W this rank's block holds: its part of K.
  Shard inner_rows() const {
    return {plan_->layer_.offset + plan_->b_part_.offset, plan_->b_part_.count};
  }

  // T's block row i is rows R_i of T, row-major (m_i x n): its ranks in j order take
  // consecutive columns of it (the inverse of the plan's gathering C).
  void scatter_t(const arma::Mat<T>& t_t) {
    GridPlan<T>& p = *plan_;
    const MatmulShape& s = p.shape();
    const bool at_root = comm_.rank() == p.root();
    for (int i = 0; i < p.grid_.pm; ++i) {
      const Shard rows = shard_of(s.m, p.grid_.pm, i);
      if (rows.count == 0 || s.n == 0) continue;
      const bool mine = !p.idle() && i == p.i_;
      const arma::Mat<T> from =
          part(t_t.memptr(), rows.offset * s.n, at_root ? rows.count * s.n : 0);
      arma::Mat<T> into = part(t_block_.memptr(), 0, mine ? t_block_.n_elem : 0);
      comm_.scatterv_columns(from, RowMajor{rows.count, s.n}, p.c_counts(i), into, p.root());
    }
  }

  // Both gradients, panel by panel, from the residual in the plan's C block.
  void backward() {
    GridPlan<T>& p = *plan_;
    RankStats& stats = comm_.stats();
    const std::size_t mi = p.rows_.count, nj = p.cols_.count;
    const T* r = p.c_block_.memptr();
    // W's panels from other ranks are parameters held while they are used.
    const ParameterHold panels(stats, (p.bt_panel_[0].n_elem + p.bt_panel_[1].n_elem) * sizeof(T),
                               false);
    for (std::size_t t = 0; t < p.panels_.size(); ++t) {
      const auto& panel = p.panels_[t];
      const std::size_t w = panel.width;
      const auto ops = p.fetch(t, static_cast<int>(t % 2));
      // dW(panel, N_j)^T (n_j x w) = R_ij^T X(R_i, panel): the owner's straight into its
      // gradient, the others' into a buffer they add to it.
      const bool g_mine = p.grid_.pm == 1 || panel.b_owner == p.i_;
      T* g = g_mine ? at_offset(gradient_t_.memptr(), panel.b_offset * nj) : partial_g_.memptr();
      record_multiply(stats, timed_multiply(stats, nj, mi, w, [&] {
                        gemm(true, false, nj, w, mi, r, mi, ops.a, ops.a_ld, g, nj);
                      }));
      if (p.grid_.pm > 1 && nj > 0) p.col_comm_->reduce_sum(part(g, 0, nj * w), panel.b_owner);
      // dX(R_i, panel) (m_i x w) = R_ij W(panel, N_j)^T, added up along the grid row.
      const bool x_mine = p.grid_.pn == 1 || panel.a_owner == p.j_;
      T* x = x_mine ? at_offset(input_grad_.memptr(), panel.a_offset * mi) : partial_x_.memptr();
      record_multiply(stats, timed_multiply(stats, mi, nj, w, [&] {
                        gemm(false, false, mi, w, nj, r, mi, ops.bt, nj, x, mi);
                      }));
      if (p.grid_.pn > 1 && mi > 0) p.row_comm_->reduce_sum(part(x, 0, mi * w), panel.a_owner);
    }
  }

  Communicator& comm_;
  std::size_t m_;
  std::unique_ptr<GridPlan<T>> plan_;
  arma::Mat<T> gradient_t_;  // dW's block, transposed as the plan holds W's (n_j x k_i)
  ParameterHold gradient_hold_;
  OptimizerState<T> optimizer_;
  ParameterHold state_hold_;
  std::vector<double> loss_;
  arma::Mat<T> t_block_;                // T(R_i, N_j)
  arma::Mat<T> input_grad_;             // dX(R_i, this rank's part of K): X's block's gradient
  arma::Mat<T> partial_g_, partial_x_;  // a panel of each, added to its owner's
  std::vector<arma::Mat<T>> saved_;     // W, M, V blocks in W's orientation (saves, loads)
};

template <Element T>
std::unique_ptr<TrainingStep<T>> grid_training_step(const TrainingSetup<T>& setup, const Grid& grid,
                                                    std::size_t panel) {
  if (grid.pk != 1) {
    throw InputError("--grid " + grid_text(grid) +
                         ": train takes 2-D grids (PMxPNx1); 2.5-D and 3-D grids multiply only",
                     setup.comm.rank(), "--grid");
  }
  return std::make_unique<GridStep<T>>(setup, grid, panel);
}

template std::unique_ptr<TrainingStep<double>> grid_training_step(const TrainingSetup<double>&,
                                                                  const Grid&, std::size_t);
template std::unique_ptr<TrainingStep<float>> grid_training_step(const TrainingSetup<float>&,
                                                                 const Grid&, std::size_t);

}  // namespace distmm

#pragma once
// A strategy's training step (train.hpp): what a strategy that trains provides
// (Strategy::training_step), and the parts its steps share. train_linear() runs the steps,
// saves the checkpoints and gathers W; the dry run (dry_run.hpp) runs the same step on a
// communicator that moves no data, so a step's events, counters and memory are written once.
//
// In a dry run (RankStats::dry()) the matrices a step allocates have no memory behind them and
// its multiplies are recorded, not run: a step does no arithmetic of its own there.
#include <armadillo>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "distmm/checkpoint.hpp"
#include "distmm/communicator.hpp"
#include "distmm/memory.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"

namespace distmm {

template <Element T>
class MatmulPlan;

// What a strategy's step is set up from.
template <Element T>
struct TrainingSetup {
  Communicator& comm;
  MatmulShape shape;        // X m x k, W k x n
  const arma::Mat<T>& x_t;  // X^T (k x m), X row-major: on the root only
  const arma::Mat<T>& t_t;  // T^T (n x m), T row-major: on the root only
  const arma::Mat<T>& w0;   // W (k x n) on the root; not read when resuming
  bool resuming = false;    // the parameters come from a checkpoint (TrainingStep::load)
  int root = 0;
  const TrainConfig& config;
  const StrategySettings& settings;
};

// The blocks a rank saves in a checkpoint: W's columns `columns` (of its rows `rows`, all k
// when not given), then the optimizer's state for them (Adam's M and V), each (rows it holds) x
// (columns it holds), the saved ones starting at column `local_first` of each. Over all ranks
// the saved blocks tile W once.
template <Element T>
struct SavedBlocks {
  std::vector<arma::Mat<T>*> matrices;
  Shard columns;
  std::size_t local_first = 0;
  std::optional<Shard> rows;
  Block block(std::size_t k) const {
    const Shard r = rows.value_or(Shard{0, k});
    return {r.offset, r.count, columns.offset, columns.count};
  }
};

// What a training step allocates at setup, counted; in a dry run matrices of that size with
// no memory behind them.
class SetupMemory {
 public:
  explicit SetupMemory(const RankStats& stats) : dry_(stats.dry()) {}
  template <Element T>
  arma::Mat<T> matrix(std::size_t rows, std::size_t cols) {
    bytes_ += static_cast<std::uint64_t>(rows) * cols * sizeof(T);
    if (dry_) return no_memory_matrix<T>(rows, cols);
    return fresh_matrix<T>(rows, cols);
  }
  void add(std::uint64_t bytes) { bytes_ += bytes; }
  bool dry() const { return dry_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  bool dry_;
  std::uint64_t bytes_ = 0;
};

template <Element T>
class TrainingStep {
 public:
  virtual ~TrainingStep() = default;
  TrainingStep(const TrainingStep&) = delete;
  TrainingStep& operator=(const TrainingStep&) = delete;

  // One step: forward, backward, the optimizer's update. Returns the loss L(W) before the
  // update, on every rank. Allocates nothing. Collective.
  virtual double step() = 0;
  // What this rank saves in a checkpoint (and loads when resuming).
  virtual SavedBlocks<T> saved() = 0;
  // Resuming: reads this rank's columns from `checkpoint` and completes what it holds.
  // Returns the bytes it read. Collective.
  virtual std::uint64_t load(const Checkpoint& checkpoint) = 0;
  // The trained W (k x n) on the root, an empty matrix elsewhere. Collective.
  virtual arma::Mat<T> gather_parameters() = 0;
  // Rows of X this rank holds.
  virtual std::size_t data_rows() const = 0;

  // Bytes its setup allocated on this rank (the plan's, the gradients', the data's, the
  // optimizer's), of which the parameters' (W or this rank's part) and the optimizer state's.
  std::uint64_t allocated_bytes() const { return memory_.bytes() + plan_allocated_; }
  std::uint64_t parameter_bytes() const { return parameter_bytes_; }
  std::uint64_t optimizer_state_bytes() const { return state_bytes_; }

 protected:
  explicit TrainingStep(Communicator& comm) : memory_(comm.stats()) {}
  SetupMemory& memory() { return memory_; }
  // Counts a plan's buffers as the step's.
  void count_plan(const MatmulPlan<T>& plan);
  void count_optimizer_state(std::uint64_t bytes) { state_bytes_ = bytes; }

 private:
  SetupMemory memory_;
  std::uint64_t plan_allocated_ = 0, parameter_bytes_ = 0, state_bytes_ = 0;
};

// The parts the built-in steps share.

// This rank's rows of an m x w matrix given row-major on the root (`full_t`, w x m): the
// root's in place, the others received into a buffer. Collective.
template <Element T>
struct RowShard {
  arma::Mat<T> own;  // non-root ranks' buffer
  const T* data;     // this rank's rows, w x rows column-major
};
template <Element T>
RowShard<T> scatter_rows_t(Communicator& comm, const arma::Mat<T>& full_t, std::size_t m,
                           std::size_t w, int root, SetupMemory& memory);

// The buffers and products of a step over a rank's rows of X (row-major rows: Y^T, R^T, dX^T),
// allocated once.
template <Element T>
class StepBuffers {
 public:
  StepBuffers(Communicator& comm, const MatmulShape& s, std::size_t rows, SetupMemory& memory);
  T* residual() { return residual_t_.memptr(); }
  // R^T = (Y^T - T_r^T) / m in place over Y^T; returns this rank's part of the loss,
  // 1/(2m) ||X_r W - T_r||^2.
  double residual_from_output(const T* t_rows_t);
  // dX_r = R_r W^T: the input gradient a layer below would need (dX_r^T = W R_r^T).
  void input_gradient(const arma::Mat<T>& w);
  // G_r = X_r^T R_r (k x n) into `g`.
  void weight_gradient(const T* x_rows_t, arma::Mat<T>& g);
  // The loss, summed over the ranks in double whatever T is. Collective.
  double allreduce_loss(double part);

 private:
  Communicator& comm_;
  MatmulShape s_;
  std::size_t rows_;
  arma::Mat<T> residual_t_, input_grad_t_;
  std::vector<double> loss_;
};

// The batch of a step whose ranks each hold their rows of X and T (the row-sharded steps):
// the rows, scattered from the root, and the step's buffers over them. Collective.
template <Element T>
struct RowBatch {
  RowBatch(const TrainingSetup<T>& s, SetupMemory& memory);
  RowShard<T> x, t;
  std::size_t rows;
  StepBuffers<T> buffers;
};

// The optimizer's update of a block of parameters (all of W, or a part) from its gradient;
// Adam keeps its moments for the same block. Allocated once; a step allocates nothing.
template <Element T>
class OptimizerState {
 public:
  OptimizerState(const TrainConfig& config, std::size_t rows, std::size_t cols,
                 SetupMemory& memory);
  std::uint64_t bytes() const { return (m_.n_elem + v_.n_elem) * sizeof(T); }
  // The blocks a checkpoint saves beside the parameters (Adam's M and V), in that order.
  std::vector<arma::Mat<T>*> state();
  // Steps taken so far (Adam's bias correction counts them).
  void set_steps_taken(std::size_t t) { t_ = t; }
  void step(arma::Mat<T>& w, const arma::Mat<T>& g);

 private:
  TrainConfig config_;
  bool dry_;
  arma::Mat<T> m_, v_;
  std::size_t t_ = 0;
};

// `parameters` followed by the optimizer's state: what a checkpoint saves.
template <Element T>
std::vector<arma::Mat<T>*> with_state(arma::Mat<T>& parameters, OptimizerState<T>& optimizer);

// Resuming blocks that `group` holds as replicas (every member all of `matrices`' columns,
// k x columns each): each rank reads its part `part` from the checkpoint, then an all-gather
// over `group` (parts counted by `counts`, in elements) completes every replica. Returns the
// bytes read. Collective over `comm` (the checkpoint's readers) and `group`.
template <Element T>
std::uint64_t load_replicated(Communicator& comm, Communicator& group, const Checkpoint& checkpoint,
                              Shard part, const std::vector<arma::Mat<T>*>& matrices,
                              const std::vector<std::size_t>& counts);

// Resuming blocks this rank alone holds: reads columns `columns` into `matrices`.
template <Element T>
std::uint64_t load_own(Communicator& comm, const Checkpoint& checkpoint, Shard columns,
                       const std::vector<arma::Mat<T>*>& matrices);

}  // namespace distmm

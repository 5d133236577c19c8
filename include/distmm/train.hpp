#pragma once
// Distributed training of a linear layer Y = X W by full-batch SGD or Adam on
//   L(W) = 1/(2m) ||X W - T||^2,   gradient G = X^T (X W - T) / m,
//   SGD:  W <- W - lr G
//   Adam: M <- b1 M + (1 - b1) G,  V <- b2 V + (1 - b2) G^2 (element-wise),
//         W <- W - lr (M / (1 - b1^t)) / (sqrt(V / (1 - b2^t)) + eps)   at step t = 1, 2, ...
//         (b1 = 0.9, b2 = 0.999, eps = 1e-8); M and V follow the parameters: replicated under
//         DP, sharded by the same columns under FSDP,
// with X (m x k, the batch) sharded by rows and W (k x n, the parameters) held as the
// strategy says:
//
// DP    every rank holds all of W (and its gradient). Per step: forward Y_r = X_r W, input
//       gradient dX_r = R_r W^T (R_r = (Y_r - T_r) / m), local weight gradient
//       G_r = X_r^T R_r, allreduce(G), the same update on every rank.
// FSDP  rank r holds only columns shard_of(n, P, r) of W and of its gradient. Per step:
//       allgather W, forward, free W; allgather W again for dX_r = R_r W^T, free W; local
//       G_r = X_r^T R_r; reduce_scatter(G) so each rank receives the summed gradient of its
//       own columns; update its shard.
// HSDP  the R x S mesh of the hsdp plan (strategies/hsdp.hpp): W sharded by columns within
//       each shard group of S ranks as under FSDP (over S), replicated across the R groups;
//       X by rows over all P ranks. Per step as FSDP within the group (two all-gathers, a
//       reduce-scatter of the gradient), then an all-reduce of the gradient shard across
//       the R replicas (as FSDP2's HSDP does): every rank's shard gets the sum over all P.
// TP-COL (Megatron column-parallel) X replicated on every rank, W sharded by columns, T by
//       the same columns. Per step: forward Y_:,r = X W_r, residual of its columns, weight
//       gradient G_r = X^T R_:,r local (no gradient communication), input gradient
//       dX = sum_r R_:,r W_r^T by all-reduce (m x k).
// All also allreduce one scalar per step: the loss. With one rank: plain single-process SGD.
// They run on the matmul plans (plan.hpp): the forward is the plan's execution on the rank's
// rows (tp-col: on its columns), X and T are held row-major, and every buffer is allocated
// before the first step.
#include <armadillo>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategy.hpp"

namespace distmm {

enum class Optimizer { sgd, adam };

// Sharded checkpoints (checkpoint.hpp) of W and the optimizer state.
struct CheckpointConfig {
  std::filesystem::path save_dir;  // empty: no saves
  std::size_t every = 0;           // save after every `every`-th step (0: at the end only)
  std::size_t keep = 2;            // committed checkpoints kept, the newest ones
  std::filesystem::path resume;    // DIR or DIR/step-N to continue from; empty: from W0
  std::uint32_t x_crc32 = 0, t_crc32 = 0, w0_crc32 = 0;  // the root's, saved and checked
};

struct TrainConfig {
  std::size_t steps = 20;  // counted from the start of training, also when resuming
  double lr = 0.1;
  Optimizer optimizer = Optimizer::sgd;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam's
  CheckpointConfig checkpoint;
  int replicas = 1;  // hsdp's R (dividing the ranks); the other strategies ignore it
};

// The strategies train_linear() runs, in the order `distmm train --strategy all` runs them.
const std::vector<Strategy>& training_strategies();

// The columns of W (and of Adam's M and V) that rank `rank` of `ranks` saves in a checkpoint
// and reads when resuming: its shard (FSDP, TP-COL), its share shard_of(n, P, r) of the
// replica (DP), its part shard_of(n_i, R, g) of its group's shard i (HSDP: the R replicas of
// a shard split it). Over all ranks they tile W's columns once.
Shard checkpoint_columns(Strategy strategy, const MatmulShape& shape, int ranks, int rank,
                         int replicas = 1);

// Elements of optimizer state per parameter element: 0 for SGD, 2 for Adam (M and V).
inline std::size_t optimizer_state_per_parameter(Optimizer o) {
  return o == Optimizer::adam ? 2 : 0;
}

template <Element T>
struct TrainResultOf {
  arma::Mat<T> w;                    // the trained W (k x n) on the root, empty elsewhere
  std::vector<double> losses;        // L(W) before each step, on every rank
  std::vector<double> step_seconds;  // wall time of each step on this rank (the first cold)
  std::size_t first_step = 0;        // steps done before this run (resumed from a checkpoint)
  std::string resumed_from;          // the checkpoint directory resumed from, or empty
  std::uint64_t bytes_read = 0;      // from the checkpoint, by this rank
  std::vector<std::string> saved;    // checkpoints committed, in order
  std::uint64_t bytes_written = 0;   // by this rank, over every save
  double save_seconds = 0;           // wall time of every save on this rank
};
using TrainResult = TrainResultOf<double>;

// X (m x k), T (m x n) and the initial W (k x n) are read on `root` only; shape is (m, k, n).
// Strategy dp, fsdp, hsdp (config.replicas) or tp-col. `on_step(step, loss)` is called on every
// rank after each step. The communicator's stats are reset once the data and parameters are in
// place, so from then on they count the training steps alone (checkpoint saves are not counted: see
// the result). With config.checkpoint.resume, W and the optimizer state come from the checkpoint
// (w0 is not read) and the steps after the checkpoint's run; with save_dir, checkpoints are saved
// after every `every`-th step and after the last (checkpoint.hpp; errors there throw
// BadCheckpoint or CheckpointWriteError on every rank).
// Every element (data, parameters, gradients, communication) is of type T; the loss is summed
// in double.
template <Element T>
TrainResultOf<T> train_linear(Strategy strategy, Communicator& comm, const MatmulShape& shape,
                              const arma::Mat<T>& x, const arma::Mat<T>& t, const arma::Mat<T>& w0,
                              const TrainConfig& config,
                              const std::function<void(std::size_t, double)>& on_step = {},
                              int root = 0);

// What rank `rank` of `ranks` sends, receives and holds per training step of `strategy`
// (the formulas of the README, in code; tests assert the counters equal them). Needs no data.
struct TrainStepFigures {
  std::uint64_t bytes_sent = 0, bytes_received = 0;  // per step, the loss's 8 bytes included
  std::uint64_t persistent_param_grad_bytes = 0;     // W (or its shard) and its gradient
  std::uint64_t peak_param_grad_bytes = 0;           // plus the unsharded W or gradient (FSDP)
  std::uint64_t optimizer_state_bytes = 0;           // Adam's M and V for what the rank holds
  bool operator==(const TrainStepFigures&) const = default;
};
TrainStepFigures predict_train_step(Strategy strategy, const MatmulShape& shape, int ranks,
                                    int rank, std::size_t element_bytes, Optimizer optimizer,
                                    int replicas = 1);

// The same SGD in one process, the reference the strategies are checked against.
template <Element T>
TrainResultOf<T> train_single_process(const arma::Mat<T>& x, const arma::Mat<T>& t,
                                      const arma::Mat<T>& w0, const TrainConfig& config);

}  // namespace distmm

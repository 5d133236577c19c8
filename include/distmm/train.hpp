#pragma once
// Distributed training of a linear layer Y = X W by full-batch SGD or Adam on
//   L(W) = 1/(2m) ||X W - T||^2,   gradient G = X^T (X W - T) / m,
//   SGD:  W <- W - lr G
//   Adam: M <- b1 M + (1 - b1) G,  V <- b2 V + (1 - b2) G^2 (element-wise),
//         W <- W - lr (M / (1 - b1^t)) / (sqrt(V / (1 - b2^t)) + eps)   at step t = 1, 2, ...
//         (b1 = 0.9, b2 = 0.999, eps = 1e-8); M and V follow the parameters,
// with X (m x k, the batch) and W (k x n, the parameters) held as the strategy says: each
// strategy that trains has a training step (train_step.hpp, in its own files under
// strategies/) that places the data and the parameters, allocates every buffer before the
// first step, and runs forward, backward and the update. Every step also all-reduces one
// scalar: the loss. With one rank every strategy is plain single-process training.
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
  StrategySettings settings;  // the strategy's own options (hsdp's replicas)
};

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
  std::size_t data_rows = 0;         // rows of X this rank holds
  std::uint64_t optimizer_state_bytes = 0;  // Adam's M and V for what this rank holds
};
using TrainResult = TrainResultOf<double>;

// X (m x k), T (m x n) and the initial W (k x n) are read on `root` only; shape is (m, k, n).
// `strategy` is one that trains (Strategy::trains), with config.settings its options.
// `on_step(step, loss)` is called on every rank after each step. The communicator's stats are
// reset once the data and parameters are in place, so from then on they count the training
// steps alone (checkpoint saves are not counted: see the result). With
// config.checkpoint.resume, W and the optimizer state come from the checkpoint (w0 is not
// read) and the steps after the checkpoint's run; with save_dir, checkpoints are saved after
// every `every`-th step and after the last (checkpoint.hpp; errors there throw BadCheckpoint
// or CheckpointWriteError on every rank).
// Every element (data, parameters, gradients, communication) is of type T; the loss is summed
// in double.
template <Element T>
TrainResultOf<T> train_linear(const Strategy& strategy, Communicator& comm,
                              const MatmulShape& shape, const arma::Mat<T>& x,
                              const arma::Mat<T>& t, const arma::Mat<T>& w0,
                              const TrainConfig& config,
                              const std::function<void(std::size_t, double)>& on_step = {},
                              int root = 0);

// What rank `rank` of `ranks` sends, receives and holds per training step of `strategy`,
// from its step run dry (dry_run.hpp): no data needed, nothing allocated.
struct TrainStepFigures {
  std::uint64_t bytes_sent = 0, bytes_received = 0;  // per step, the loss's 8 bytes included
  std::uint64_t persistent_param_grad_bytes = 0;     // W (or its part) and its gradient
  std::uint64_t peak_param_grad_bytes = 0;           // plus the unsharded W or gradient (FSDP)
  std::uint64_t optimizer_state_bytes = 0;           // Adam's M and V for what the rank holds
  bool operator==(const TrainStepFigures&) const = default;
};
struct TrainRankPlan {
  TrainStepFigures figures;
  Block saved_block;                  // the block of W it saves in a checkpoint
  std::size_t data_rows = 0;          // rows of X it holds
  std::uint64_t allocated_bytes = 0;  // what its step's setup allocates
};
TrainRankPlan training_plan(const Strategy& strategy, const MatmulShape& shape, int ranks, int rank,
                            std::size_t element_bytes, const TrainConfig& config);

// The same SGD in one process, the reference the strategies are checked against.
template <Element T>
TrainResultOf<T> train_single_process(const arma::Mat<T>& x, const arma::Mat<T>& t,
                                      const arma::Mat<T>& w0, const TrainConfig& config);

}  // namespace distmm

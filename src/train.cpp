#include "distmm/train.hpp"

#include <string>

#include "distmm/error.hpp"
#include "distmm/fsdp.hpp"
#include "distmm/row_exchange.hpp"
#include "distmm/sharding.hpp"
#include "local_multiply.hpp"

namespace distmm {
namespace {

// Runs `f` (a BLAS product rows x inner times inner x cols) and records it as a multiply.
template <typename F>
arma::mat timed(Communicator& comm, std::size_t rows, std::size_t inner, std::size_t cols, F&& f) {
  TraceEvent e;
  e.op = OpKind::compute;
  e.rows = rows;
  e.inner = inner;
  e.cols = cols;
  e.start_s = comm.stats().now();
  arma::mat out = f();
  e.duration_s = comm.stats().now() - e.start_s;
  record_multiply(comm.stats(), e);
  return out;
}

struct StepParts {
  arma::mat residual;  // R_r = (X_r W - T_r) / m
  double loss_part;    // 1/(2m) ||X_r W - T_r||^2
};

StepParts forward(Communicator& comm, const arma::mat& x_rows, const arma::mat& t_rows,
                  const arma::mat& w, std::size_t m) {
  arma::mat y =
      timed(comm, x_rows.n_rows, w.n_rows, w.n_cols, [&] { return arma::mat(x_rows * w); });
  y -= t_rows;
  const double loss_part = 0.5 * arma::accu(arma::square(y)) / static_cast<double>(m);
  y /= static_cast<double>(m);
  return {std::move(y), loss_part};
}

// dX_r = R_r W^T: the input gradient a layer below would need; computed as real training does.
void input_gradient(Communicator& comm, const arma::mat& residual, const arma::mat& w) {
  const arma::mat dx =
      timed(comm, residual.n_rows, w.n_cols, w.n_rows, [&] { return arma::mat(residual * w.t()); });
  (void)dx;
}

arma::mat weight_gradient(Communicator& comm, const arma::mat& x_rows, const arma::mat& residual) {
  return timed(comm, x_rows.n_cols, x_rows.n_rows, residual.n_cols,
               [&] { return arma::mat(x_rows.t() * residual); });
}

double allreduce_loss(Communicator& comm, double part) {
  std::vector<double> loss{part};
  comm.allreduce_sum(loss);
  return loss[0];
}

void check_inputs(const MatmulShape& s, const arma::mat& x, const arma::mat& t, const arma::mat& w0,
                  int rank) {
  check_operand(x, s.m, s.k, "train: X", rank);
  check_operand(t, s.m, s.n, "train: T", rank);
  check_operand(w0, s.k, s.n, "train: W", rank);
}

}  // namespace

TrainResult train_single_process(const arma::mat& x, const arma::mat& t, const arma::mat& w0,
                                 const TrainConfig& config) {
  TrainResult result{w0, {}};
  const double m = static_cast<double>(x.n_rows);
  for (std::size_t step = 0; step < config.steps; ++step) {
    arma::mat r = x * result.w - t;
    result.losses.push_back(0.5 * arma::accu(arma::square(r)) / m);
    r /= m;
    result.w -= config.lr * (x.t() * r);
  }
  return result;
}

TrainResult train_linear(Strategy strategy, Communicator& comm, const MatmulShape& shape,
                         const arma::mat& x, const arma::mat& t, const arma::mat& w0,
                         const TrainConfig& config,
                         const std::function<void(std::size_t, double)>& on_step, int root) {
  if (strategy == Strategy::fsdp_overlap) {
    throw InputError("train: strategy fsdp-overlap is not a training strategy (use dp or fsdp)");
  }
  const int p = comm.size(), rank = comm.rank();
  if (rank == root) check_inputs(shape, x, t, w0, rank);
  const std::size_t k = shape.k, n = shape.n;
  const arma::mat x_rows = p == 1 ? x : scatter_rows(comm, x, shape.m, k, root);
  const arma::mat t_rows = p == 1 ? t : scatter_rows(comm, t, shape.m, n, root);
  TrainResult result;

  if (strategy == Strategy::dp || p == 1) {
    arma::mat w = rank == root ? w0 : arma::mat(k, n);
    const ParameterHold params = hold(comm, w, true);
    arma::mat gradient(k, n);
    const ParameterHold gradients = hold(comm, gradient, true);
    if (p > 1) comm.broadcast(w, root);
    // The counters from here on describe the training steps (setup excluded).
    comm.stats().reset();
    for (std::size_t step = 0; step < config.steps; ++step) {
      const StepParts parts = forward(comm, x_rows, t_rows, w, shape.m);
      input_gradient(comm, parts.residual, w);
      gradient = weight_gradient(comm, x_rows, parts.residual);
      if (p > 1) comm.allreduce_sum(gradient);
      const double loss = p > 1 ? allreduce_loss(comm, parts.loss_part) : parts.loss_part;
      w -= config.lr * gradient;
      result.losses.push_back(loss);
      if (on_step) on_step(step, loss);
    }
    if (rank == root) result.w = std::move(w);
    return result;
  }

  // FSDP: parameters, gradients (and SGD's empty optimizer state) sharded by columns.
  ParameterShard<double> shard = shard_parameters(comm, w0, k, n, root);
  const ParameterHold params = hold(comm, shard.columns, true);
  arma::mat gradient_shard(k, shard.columns.n_cols);
  const ParameterHold gradients = hold(comm, gradient_shard, true);
  const auto counts = scaled(shard_counts(n, p), k);
  comm.stats().reset();
  for (std::size_t step = 0; step < config.steps; ++step) {
    StepParts parts;
    {
      const arma::mat w = gather_parameters(comm, shard);
      const ParameterHold gathered = hold(comm, w, false);
      parts = forward(comm, x_rows, t_rows, w, shape.m);
    }
    {
      const arma::mat w = gather_parameters(comm, shard);
      const ParameterHold gathered = hold(comm, w, false);
      input_gradient(comm, parts.residual, w);
    }
    {
      const arma::mat local = weight_gradient(comm, x_rows, parts.residual);
      const ParameterHold unsharded = hold(comm, local, false);
      comm.reduce_scatter_sum(local, gradient_shard, counts);
    }
    const double loss = allreduce_loss(comm, parts.loss_part);
    shard.columns -= config.lr * gradient_shard;
    result.losses.push_back(loss);
    if (on_step) on_step(step, loss);
  }
  arma::mat w(rank == root ? k : 0, rank == root ? n : 0);
  comm.gatherv(shard.columns, w, counts, root);
  if (rank == root) result.w = std::move(w);
  return result;
}

}  // namespace distmm

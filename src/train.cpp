#include "distmm/train.hpp"

#include <chrono>
#include <cmath>
#include <string>

#include "distmm/error.hpp"
#include "distmm/memory.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/dp.hpp"
#include "distmm/strategies/fsdp.hpp"
#include "local_multiply.hpp"

namespace distmm {
namespace {

template <Element T>
void check_inputs(const MatmulShape& s, const arma::Mat<T>& x, const arma::Mat<T>& t,
                  const arma::Mat<T>& w0, int rank) {
  check_operand(x, s.m, s.k, "train: X", rank);
  check_operand(t, s.m, s.n, "train: T", rank);
  check_operand(w0, s.k, s.n, "train: W", rank);
}

// This rank's rows of an m x w matrix, row-major (w x m_r): the root's in place in `full_t`
// (w x m, the matrix transposed), the others received into a fresh buffer.
template <Element T>
struct RowShard {
  arma::Mat<T> own;  // non-root ranks' buffer
  const T* data;     // this rank's rows
};
template <Element T>
RowShard<T> scatter_rows_t(Communicator& comm, const arma::Mat<T>& full_t, std::size_t m,
                           std::size_t w, int root) {
  const int p = comm.size();
  const Shard mine = shard_of(m, p, comm.rank());
  RowShard<T> out{};
  if (comm.rank() == root) {
    if (p > 1) comm.scatterv(full_t, scaled(shard_counts(m, p), w), in_place, root);
    out.data = full_t.memptr() + mine.offset * w;
    return out;
  }
  out.own = fresh_matrix<T>(w, mine.count);
  comm.scatterv(std::span<const T>{}, scaled(shard_counts(m, p), w), out.own, root);
  out.data = out.own.memptr();
  return out;
}

// The buffers and products of one step, allocated once (row-major rows: Y^T, R^T, dX^T).
template <Element T>
class StepBuffers {
 public:
  StepBuffers(Communicator& comm, const MatmulShape& s, std::size_t rows)
      : comm_(comm),
        s_(s),
        rows_(rows),
        residual_t_(fresh_matrix<T>(s.n, rows)),
        input_grad_t_(fresh_matrix<T>(s.k, rows)),
        loss_(1) {}

  T* residual() { return residual_t_.memptr(); }

  // R^T = (Y^T - T_r^T) / m in place over Y^T; returns this rank's part of the loss,
  // 1/(2m) ||X_r W - T_r||^2.
  double residual_from_output(const T* t_rows_t) {
    const arma::Mat<T> t(const_cast<T*>(t_rows_t), s_.n, rows_, false, true);
    residual_t_ -= t;
    const double part = 0.5 * static_cast<double>(arma::accu(arma::square(residual_t_))) /
                        static_cast<double>(s_.m);
    residual_t_ /= static_cast<T>(s_.m);
    return part;
  }

  // dX_r = R_r W^T: the input gradient a layer below would need; computed as real training
  // does (dX_r^T = W R_r^T).
  void input_gradient(const arma::Mat<T>& w) {
    record_multiply(comm_.stats(), timed_multiply(comm_.stats(), rows_, s_.n, s_.k, [&] {
                      gemm(false, false, s_.k, rows_, s_.n, w.memptr(), s_.k, residual_t_.memptr(),
                           s_.n, input_grad_t_.memptr(), s_.k);
                    }));
  }

  // G_r = X_r^T R_r (k x n) into `g`.
  void weight_gradient(const T* x_rows_t, arma::Mat<T>& g) {
    record_multiply(comm_.stats(), timed_multiply(comm_.stats(), s_.k, rows_, s_.n, [&] {
                      gemm(false, true, s_.k, s_.n, rows_, x_rows_t, s_.k, residual_t_.memptr(),
                           s_.n, g.memptr(), s_.k);
                    }));
  }

  // The loss is summed in double whatever T is.
  double allreduce_loss(double part) {
    loss_[0] = part;
    if (comm_.size() > 1) comm_.allreduce_sum(loss_);
    return loss_[0];
  }

 private:
  Communicator& comm_;
  MatmulShape s_;
  std::size_t rows_;
  arma::Mat<T> residual_t_, input_grad_t_;
  std::vector<double> loss_;
};

// The optimizer's step on a block of parameters (all of W, or a shard) with its gradient; Adam
// keeps its moments for the same block. Allocated once; a step allocates nothing.
template <Element T>
class OptimizerState {
 public:
  OptimizerState(const TrainConfig& config, std::size_t rows, std::size_t cols) : config_(config) {
    if (config.optimizer == Optimizer::adam) {
      m_ = fresh_matrix<T>(rows, cols);
      v_ = fresh_matrix<T>(rows, cols);
      m_.zeros();
      v_.zeros();
    }
  }
  std::uint64_t bytes() const { return (m_.n_elem + v_.n_elem) * sizeof(T); }

  void step(arma::Mat<T>& w, const arma::Mat<T>& g) {
    const T lr = static_cast<T>(config_.lr);
    if (config_.optimizer == Optimizer::sgd) {
      w -= lr * g;
      return;
    }
    ++t_;
    const T b1 = static_cast<T>(config_.beta1), b2 = static_cast<T>(config_.beta2);
    const T c1 = static_cast<T>(1 - std::pow(config_.beta1, static_cast<double>(t_)));
    const T c2 = static_cast<T>(1 - std::pow(config_.beta2, static_cast<double>(t_)));
    m_ = b1 * m_ + (1 - b1) * g;
    v_ = b2 * v_ + (1 - b2) * arma::square(g);
    w -= lr * (m_ / c1) / (arma::sqrt(v_ / c2) + static_cast<T>(config_.eps));
  }

 private:
  TrainConfig config_;
  arma::Mat<T> m_, v_;
  std::size_t t_ = 0;
};

}  // namespace

template <Element T>
TrainResultOf<T> train_single_process(const arma::Mat<T>& x, const arma::Mat<T>& t,
                                      const arma::Mat<T>& w0, const TrainConfig& config) {
  TrainResultOf<T> result{w0, {}, {}};
  const T m = static_cast<T>(x.n_rows);
  OptimizerState<T> optimizer(config, w0.n_rows, w0.n_cols);
  for (std::size_t step = 0; step < config.steps; ++step) {
    arma::Mat<T> r = x * result.w - t;
    result.losses.push_back(0.5 * static_cast<double>(arma::accu(arma::square(r))) /
                            static_cast<double>(m));
    r /= m;
    optimizer.step(result.w, arma::Mat<T>(x.t() * r));
  }
  return result;
}

template <Element T>
TrainResultOf<T> train_linear(Strategy strategy, Communicator& comm, const MatmulShape& shape,
                              const arma::Mat<T>& x, const arma::Mat<T>& t, const arma::Mat<T>& w0,
                              const TrainConfig& config,
                              const std::function<void(std::size_t, double)>& on_step, int root) {
  if (strategy == Strategy::fsdp_overlap) {
    throw InputError("train: strategy fsdp-overlap is not a training strategy (use dp or fsdp)");
  }
  const int p = comm.size(), rank = comm.rank();
  if (rank == root) check_inputs(shape, x, t, w0, rank);
  const std::size_t k = shape.k, n = shape.n;
  // Row-major X and T (their transposes), so each rank's rows are one block.
  const arma::Mat<T> x_t = rank == root ? arma::Mat<T>(x.t()) : arma::Mat<T>();
  const arma::Mat<T> t_t = rank == root ? arma::Mat<T>(t.t()) : arma::Mat<T>();
  const RowShard<T> x_rows = scatter_rows_t(comm, x_t, shape.m, k, root);
  const RowShard<T> t_rows = scatter_rows_t(comm, t_t, shape.m, n, root);
  const std::size_t rows = shard_of(shape.m, p, rank).count;
  StepBuffers<T> step_buffers(comm, shape, rows);
  TrainResultOf<T> result;
  const auto run_steps = [&](auto&& one_step) {
    // The counters from here on describe the training steps (setup excluded).
    comm.stats().reset();
    for (std::size_t step = 0; step < config.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      const double loss = one_step();
      result.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      result.losses.push_back(loss);
      if (on_step) on_step(step, loss);
    }
  };

  if (strategy == Strategy::dp || p == 1) {
    DpPlan<T> plan(comm, shape, w0, root);  // W broadcast, held by every rank
    arma::Mat<T>& w = plan.parameters();
    arma::Mat<T> gradient = fresh_matrix<T>(k, n);
    const ParameterHold gradients = hold(comm, gradient, true);
    OptimizerState<T> optimizer(config, k, n);  // replicated, as W is
    const ParameterHold state(comm.stats(), optimizer.bytes(), true);
    run_steps([&] {
      plan.execute_rows(x_rows.data, step_buffers.residual());
      const double part = step_buffers.residual_from_output(t_rows.data);
      step_buffers.input_gradient(w);
      step_buffers.weight_gradient(x_rows.data, gradient);
      if (p > 1) comm.allreduce_sum(gradient);
      const double loss = step_buffers.allreduce_loss(part);
      optimizer.step(w, gradient);
      return loss;
    });
    if (rank == root) result.w = w;
    return result;
  }

  // FSDP: parameters, gradients and the optimizer state (none for SGD) sharded by columns.
  FsdpPlan<T> plan(comm, shape, w0, root);
  arma::Mat<T>& shard = plan.shard();
  arma::Mat<T> gradient_shard = fresh_matrix<T>(k, shard.n_cols);
  const ParameterHold gradients = hold(comm, gradient_shard, true);
  OptimizerState<T> optimizer(config, k, shard.n_cols);
  const ParameterHold state(comm.stats(), optimizer.bytes(), true);
  arma::Mat<T> local_gradient = fresh_matrix<T>(k, n);
  const auto counts = scaled(shard_counts(n, p), k);
  run_steps([&] {
    plan.execute_rows(x_rows.data, step_buffers.residual());  // all-gathers W, multiplies
    const double part = step_buffers.residual_from_output(t_rows.data);
    {
      const arma::Mat<T>& w = plan.gather();  // again, for the input gradient
      const ParameterHold gathered(comm.stats(), plan.gathered_bytes(), false);
      step_buffers.input_gradient(w);
    }
    {
      const ParameterHold unsharded = hold(comm, local_gradient, false);
      step_buffers.weight_gradient(x_rows.data, local_gradient);
      comm.reduce_scatter_sum(local_gradient, gradient_shard, counts);
    }
    const double loss = step_buffers.allreduce_loss(part);
    optimizer.step(shard, gradient_shard);
    return loss;
  });
  arma::Mat<T> w(rank == root ? k : 0, rank == root ? n : 0);
  comm.gatherv(shard, w, counts, root);
  if (rank == root) result.w = std::move(w);
  return result;
}

#define DISTMM_INSTANTIATE(T)                                                              \
  template TrainResultOf<T> train_single_process(const arma::Mat<T>&, const arma::Mat<T>&, \
                                                 const arma::Mat<T>&, const TrainConfig&); \
  template TrainResultOf<T> train_linear(Strategy, Communicator&, const MatmulShape&,      \
                                         const arma::Mat<T>&, const arma::Mat<T>&,         \
                                         const arma::Mat<T>&, const TrainConfig&,          \
                                         const std::function<void(std::size_t, double)>&, int);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm

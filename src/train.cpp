#include "distmm/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "distmm/checkpoint.hpp"
#include "distmm/error.hpp"
#include "distmm/memory.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategies/dp.hpp"
#include "distmm/strategies/fsdp.hpp"
#include "distmm/strategies/hsdp.hpp"
#include "distmm/strategies/tp_col.hpp"
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
  // The blocks a checkpoint saves beside the parameters (Adam's M and V), in that order.
  std::vector<arma::Mat<T>*> state() {
    if (config_.optimizer == Optimizer::adam) return {&m_, &v_};
    return {};
  }
  // Steps taken so far (Adam's bias correction counts them).
  void set_steps_taken(std::size_t t) { t_ = t; }

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

const std::vector<Strategy>& training_strategies() {
  static const std::vector<Strategy> all{Strategy::dp, Strategy::fsdp, Strategy::hsdp,
                                         Strategy::tp_col};
  return all;
}

Shard checkpoint_columns(Strategy strategy, const MatmulShape& shape, int ranks, int rank,
                         int replicas) {
  if (strategy == Strategy::hsdp && ranks > 1) {
    const Mesh mesh = make_mesh(ranks, replicas);
    const Shard shard = shard_of(shape.n, mesh.group_size, mesh.index_of(rank));
    const Shard part = shard_of(shard.count, mesh.replicas, mesh.group_of(rank));
    return {shard.offset + part.offset, part.count};
  }
  return shard_of(shape.n, ranks, rank);
}

TrainStepFigures predict_train_step(Strategy strategy, const MatmulShape& shape, int ranks,
                                    int rank, std::size_t element_bytes, Optimizer optimizer,
                                    int replicas) {
  const std::uint64_t psi = static_cast<std::uint64_t>(shape.k) * shape.n * element_bytes;
  const std::uint64_t others = static_cast<std::uint64_t>(ranks - 1);
  constexpr std::uint64_t kLoss = sizeof(double);
  TrainStepFigures f;
  const std::size_t state = optimizer_state_per_parameter(optimizer);
  if (strategy == Strategy::dp || ranks == 1) {
    // All-reduce of the gradient and of the loss; W and its gradient replicated.
    f.bytes_sent = f.bytes_received = ranks == 1 ? 0 : others * (psi + kLoss);
    f.persistent_param_grad_bytes = f.peak_param_grad_bytes = 2 * psi;
    f.optimizer_state_bytes = state * psi;
    return f;
  }
  if (strategy == Strategy::tp_col) {
    // The input gradient's all-reduce (m x k) and the loss's; W and its gradient sharded.
    const std::uint64_t dx = static_cast<std::uint64_t>(shape.m) * shape.k * element_bytes;
    const std::uint64_t own =
        static_cast<std::uint64_t>(shape.k) * shard_of(shape.n, ranks, rank).count * element_bytes;
    f.bytes_sent = f.bytes_received = others * (dx + kLoss);
    f.persistent_param_grad_bytes = f.peak_param_grad_bytes = 2 * own;
    f.optimizer_state_bytes = state * own;
    return f;
  }
  if (strategy == Strategy::hsdp) {
    // FSDP within the shard group of S, then the shard's all-reduce across the R replicas.
    const Mesh mesh = make_mesh(ranks, replicas);
    const int s = mesh.group_size;
    const std::uint64_t own = static_cast<std::uint64_t>(shape.k) *
                              shard_of(shape.n, s, mesh.index_of(rank)).count * element_bytes;
    const auto others_s = static_cast<std::uint64_t>(s - 1);
    const auto others_r = static_cast<std::uint64_t>(mesh.replicas - 1);
    const std::uint64_t scatter_sent = s > 1 ? psi - own : 0, scatter_received = others_s * own;
    f.bytes_sent = 2 * others_s * own + scatter_sent + others_r * own + others * kLoss;
    f.bytes_received = 2 * (psi - own) + scatter_received + others_r * own + others * kLoss;
    f.persistent_param_grad_bytes = 2 * own;
    f.peak_param_grad_bytes = 2 * own + (s > 1 ? psi : 0);
    f.optimizer_state_bytes = state * own;
    return f;
  }
  // FSDP: two all-gathers of W, a reduce-scatter of the gradient, the loss's all-reduce.
  const std::uint64_t own =
      static_cast<std::uint64_t>(shape.k) * shard_of(shape.n, ranks, rank).count * element_bytes;
  f.bytes_sent = 2 * others * own + (psi - own) + others * kLoss;
  f.bytes_received = 2 * (psi - own) + others * own + others * kLoss;
  f.persistent_param_grad_bytes = 2 * own;
  f.peak_param_grad_bytes = 2 * own + psi;
  f.optimizer_state_bytes = state * own;
  return f;
}

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

namespace {

CheckpointMeta checkpoint_meta(Strategy strategy, const Communicator& comm,
                               const MatmulShape& shape, const TrainConfig& c) {
  CheckpointMeta meta;
  meta.strategy = std::string(name_of(strategy));
  meta.ranks = comm.size();
  meta.shape = shape;
  meta.optimizer = c.optimizer;
  meta.lr = c.lr;
  meta.beta1 = c.beta1;
  meta.beta2 = c.beta2;
  meta.eps = c.eps;
  meta.x_crc32 = c.checkpoint.x_crc32;
  meta.t_crc32 = c.checkpoint.t_crc32;
  meta.w0_crc32 = c.checkpoint.w0_crc32;
  return meta;
}

// Pointers to column `first` of each matrix (k x n column-major: the block from there on is
// contiguous).
template <Element T>
std::vector<T*> columns_from(const std::vector<arma::Mat<T>*>& matrices, std::size_t first) {
  std::vector<T*> out;
  for (arma::Mat<T>* m : matrices) out.push_back(m->memptr() + first * m->n_rows);
  return out;
}

}  // namespace

template <Element T>
TrainResultOf<T> train_linear(Strategy strategy, Communicator& comm, const MatmulShape& shape,
                              const arma::Mat<T>& x, const arma::Mat<T>& t, const arma::Mat<T>& w0,
                              const TrainConfig& config,
                              const std::function<void(std::size_t, double)>& on_step, int root) {
  if (std::find(training_strategies().begin(), training_strategies().end(), strategy) ==
      training_strategies().end()) {
    throw InputError("train: strategy " + std::string(name_of(strategy)) +
                         " is not a training strategy (use dp, fsdp, hsdp or tp-col)",
                     comm.rank(), "--strategy");
  }
  if (strategy == Strategy::hsdp) make_mesh(comm.size(), config.replicas);  // throws if bad
  const int p = comm.size(), rank = comm.rank();
  const CheckpointConfig& ckc = config.checkpoint;
  CheckpointMeta meta = checkpoint_meta(strategy, comm, shape, config);
  meta.dtype = data_type_of<T>();
  TrainResultOf<T> result;
  std::optional<Checkpoint> resume;
  if (!ckc.resume.empty()) {
    resume = open_checkpoint(comm, ckc.resume, meta);
    result.first_step = resume->meta.step;
    result.resumed_from = resume->dir.string();
    if (result.first_step >= config.steps) {
      throw InputError("--steps " + std::to_string(config.steps) + ": checkpoint " +
                           result.resumed_from + " is at step " +
                           std::to_string(result.first_step) +
                           ", so nothing is left to run (--steps counts from the start of "
                           "training)",
                       rank, "--steps");
    }
  }
  if (!ckc.save_dir.empty()) check_save_dir(comm, ckc.save_dir, result.first_step);
  if (rank == root && !resume) check_inputs(shape, x, t, w0, rank);
  if (rank == root && resume) {
    check_operand(x, shape.m, shape.k, "train: X", rank);
    check_operand(t, shape.m, shape.n, "train: T", rank);
  }
  const std::size_t k = shape.k, n = shape.n;
  // Row-major X and T (their transposes), so each rank's rows are one block.
  const arma::Mat<T> x_t = rank == root ? arma::Mat<T>(x.t()) : arma::Mat<T>();
  const arma::Mat<T> t_t = rank == root ? arma::Mat<T>(t.t()) : arma::Mat<T>();
  // Runs the steps; after each one due, saves `saved` (W, then M and V), whose columns
  // `columns` of W start at column `local_first` of each matrix.
  const auto run_steps = [&](auto&& one_step, const std::vector<arma::Mat<T>*>& saved,
                             Shard columns, std::size_t local_first) {
    // Every rank's setup done before the first step is timed: the tail of the setup's
    // scatters to far ranks (bytes still in flight when the root's sends returned) is not
    // the step's (over 2 namespace hosts at 200 Mbit/s, 2 ranks each, the root's first
    // all-reduce waited 295 ms for them, of a 0.40 s first step). The counters from here on
    // describe the training steps (setup excluded).
    comm.barrier();
    comm.stats().reset();
    for (std::size_t step = result.first_step; step < config.steps; ++step) {
      const auto start = std::chrono::steady_clock::now();
      const double loss = one_step();
      result.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      result.losses.push_back(loss);
      if (on_step) on_step(step, loss);
      const std::size_t done = step + 1;
      if (ckc.save_dir.empty() ||
          !(done == config.steps || (ckc.every > 0 && done % ckc.every == 0))) {
        continue;
      }
      // A save's own messages are not a training step's: the counters are put back.
      const RankStats counted = comm.stats();
      meta.step = done;
      const std::vector<T*> blocks = columns_from(saved, local_first);
      const std::vector<const T*> sections(blocks.begin(), blocks.end());
      const SaveFigures f = save_checkpoint<T>(
          comm, ckc.save_dir, meta, std::span<const T* const>(sections), ckc.keep, columns);
      comm.stats() = counted;
      result.saved.push_back(f.committed.string());
      result.bytes_written += f.bytes_written;
      result.save_seconds += f.seconds;
    }
  };
  const Shard saved_columns = checkpoint_columns(strategy, shape, p, rank, config.replicas);

  if (strategy == Strategy::tp_col && p > 1) {
    // TP-COL: W, its gradient and the optimizer state sharded by columns; X replicated; T's
    // columns of the shard.
    auto plan = resume ? std::make_unique<TpColPlan<T>>(comm, shape, unplaced, root)
                       : std::make_unique<TpColPlan<T>>(comm, shape, w0, root);
    arma::Mat<T>& shard = plan->shard();
    const std::size_t m = shape.m, columns = shard.n_cols;
    // X^T (k x m): the root's own, a copy on every other rank.
    arma::Mat<T> x_copy = rank == root ? arma::Mat<T>() : fresh_matrix<T>(k, m);
    const T* x_all = rank == root ? x_t.memptr() : x_copy.memptr();
    comm.broadcast(std::span<T>(const_cast<T*>(x_all), k * m), root);  // read at the root
    arma::Mat<T> t_columns = fresh_matrix<T>(m, columns);
    const RowMajor t_layout{m, n};  // T row-major: each rank's columns of it
    if (rank == root) {
      comm.scatterv_columns(t_t, t_layout, shard_counts(n, p), t_columns, root);
    } else {
      comm.scatterv_columns(std::span<const T>{}, t_layout, shard_counts(n, p), t_columns, root);
    }
    arma::Mat<T> residual = fresh_matrix<T>(m, columns), input_grad_t = fresh_matrix<T>(k, m);
    arma::Mat<T> gradient = fresh_matrix<T>(k, columns);
    const ParameterHold gradients = hold(comm, gradient, true);
    OptimizerState<T> optimizer(config, k, columns);
    const ParameterHold state(comm.stats(), optimizer.bytes(), true);
    std::vector<arma::Mat<T>*> saved{&shard};
    for (arma::Mat<T>* mat : optimizer.state()) saved.push_back(mat);
    if (resume) {
      result.bytes_read = load_columns<T>(comm, *resume, saved_columns, columns_from(saved, 0));
      optimizer.set_steps_taken(result.first_step);
    }
    std::vector<double> loss(1);
    RankStats& stats = comm.stats();
    run_steps(
        [&] {
          plan->multiply_columns(x_all, residual.memptr());  // Y_:,r = X W_r
          residual -= t_columns;
          loss[0] = 0.5 * static_cast<double>(arma::accu(arma::square(residual))) /
                    static_cast<double>(m);
          residual /= static_cast<T>(m);
          // dX^T (k x m) = W_r R_:,r^T, summed over the ranks' columns.
          record_multiply(stats, timed_multiply(stats, m, columns, k, [&] {
                            gemm(false, true, k, m, columns, shard.memptr(), k, residual.memptr(),
                                 m, input_grad_t.memptr(), k);
                          }));
          comm.allreduce_sum(input_grad_t);
          // G_r = X^T R_:,r: this rank's columns of the gradient, whole.
          record_multiply(stats, timed_multiply(stats, k, m, columns, [&] {
                            gemm(false, false, k, columns, m, x_all, k, residual.memptr(), m,
                                 gradient.memptr(), k);
                          }));
          comm.allreduce_sum(loss);
          optimizer.step(shard, gradient);
          return loss[0];
        },
        saved, saved_columns, 0);
    arma::Mat<T> w(rank == root ? k : 0, rank == root ? n : 0);
    comm.gatherv(shard, w, scaled(shard_counts(n, p), k), root);
    if (rank == root) result.w = std::move(w);
    return result;
  }

  const RowShard<T> x_rows = scatter_rows_t(comm, x_t, shape.m, k, root);
  const RowShard<T> t_rows = scatter_rows_t(comm, t_t, shape.m, n, root);
  const std::size_t rows = shard_of(shape.m, p, rank).count;
  StepBuffers<T> step_buffers(comm, shape, rows);

  if (strategy == Strategy::dp || p == 1) {
    // W broadcast (or read from the checkpoint), held by every rank.
    auto plan = resume ? std::make_unique<DpPlan<T>>(comm, shape, unplaced, root)
                       : std::make_unique<DpPlan<T>>(comm, shape, w0, root);
    arma::Mat<T>& w = plan->parameters();
    arma::Mat<T> gradient = fresh_matrix<T>(k, n);
    const ParameterHold gradients = hold(comm, gradient, true);
    OptimizerState<T> optimizer(config, k, n);  // replicated, as W is
    const ParameterHold state(comm.stats(), optimizer.bytes(), true);
    std::vector<arma::Mat<T>*> saved{&w};
    for (arma::Mat<T>* m : optimizer.state()) saved.push_back(m);
    // With one rank every strategy is this one; its checkpoint holds all the columns.
    const Shard share = shard_of(n, p, rank);
    if (resume) {
      // Each rank reads its share of the columns; the all-gather completes every replica.
      const auto counts = scaled(shard_counts(n, p), k);
      std::vector<arma::Mat<T>> parts(p > 1 ? saved.size() : 0);
      std::vector<T*> into = columns_from(saved, 0);
      if (p > 1) {
        into.clear();
        for (auto& part : parts) {
          part.set_size(k, share.count);
          into.push_back(part.memptr());
        }
      }
      result.bytes_read = load_columns<T>(comm, *resume, share, into);
      for (std::size_t i = 0; p > 1 && i < saved.size(); ++i) {
        comm.allgatherv(parts[i], *saved[i], counts);
      }
      optimizer.set_steps_taken(result.first_step);
    }
    run_steps(
        [&] {
          plan->execute_rows(x_rows.data, step_buffers.residual());
          const double part = step_buffers.residual_from_output(t_rows.data);
          step_buffers.input_gradient(w);
          step_buffers.weight_gradient(x_rows.data, gradient);
          if (p > 1) comm.allreduce_sum(gradient);
          const double loss = step_buffers.allreduce_loss(part);
          optimizer.step(w, gradient);
          return loss;
        },
        saved, share, share.offset);
    if (rank == root) result.w = w;
    return result;
  }

  if (strategy == Strategy::hsdp) {
    // HSDP: as FSDP within each shard group, the shards replicated across the groups.
    auto plan = resume ? std::make_unique<HsdpPlan<T>>(comm, shape, unplaced, config.replicas, root)
                       : std::make_unique<HsdpPlan<T>>(comm, shape, w0, config.replicas, root);
    const Mesh mesh = plan->mesh();
    const int s = mesh.group_size;
    arma::Mat<T>& shard = plan->shard();
    const Shard columns = plan->columns();
    arma::Mat<T> gradient_shard = fresh_matrix<T>(k, shard.n_cols);
    const ParameterHold gradients = hold(comm, gradient_shard, true);
    OptimizerState<T> optimizer(config, k, shard.n_cols);
    const ParameterHold state(comm.stats(), optimizer.bytes(), true);
    std::vector<arma::Mat<T>*> saved{&shard};
    for (arma::Mat<T>* m : optimizer.state()) saved.push_back(m);
    const std::size_t local_first = saved_columns.offset - columns.offset;
    if (resume) {
      // Each replica reads its part of the shard; the all-gather across the replicas
      // completes it.
      std::vector<arma::Mat<T>> parts(saved.size());
      std::vector<T*> into;
      for (auto& part : parts) {
        part.set_size(k, saved_columns.count);
        into.push_back(part.memptr());
      }
      result.bytes_read = load_columns<T>(comm, *resume, saved_columns, into);
      const auto counts = scaled(shard_counts(columns.count, mesh.replicas), k);
      for (std::size_t i = 0; i < saved.size(); ++i) {
        plan->replica_group().allgatherv(parts[i], *saved[i], counts);
      }
      optimizer.set_steps_taken(result.first_step);
    }
    // A group of one computes the gradient of all of W, its shard: nothing to reduce-scatter.
    arma::Mat<T> local_gradient = s > 1 ? fresh_matrix<T>(k, n) : arma::Mat<T>();
    const auto counts = scaled(shard_counts(n, s), k);
    run_steps(
        [&] {
          plan->execute_rows(x_rows.data, step_buffers.residual());  // all-gathers W, multiplies
          const double part = step_buffers.residual_from_output(t_rows.data);
          {
            const arma::Mat<T>& w = plan->gather();  // again, for the input gradient
            const ParameterHold gathered(comm.stats(), s > 1 ? plan->gathered_bytes() : 0, false);
            step_buffers.input_gradient(w);
          }
          if (s > 1) {
            const ParameterHold unsharded = hold(comm, local_gradient, false);
            step_buffers.weight_gradient(x_rows.data, local_gradient);
            plan->shard_group().reduce_scatter_sum(local_gradient, gradient_shard, counts);
          } else {
            step_buffers.weight_gradient(x_rows.data, gradient_shard);
          }
          if (mesh.replicas > 1) plan->replica_group().allreduce_sum(gradient_shard);
          const double loss = step_buffers.allreduce_loss(part);
          optimizer.step(shard, gradient_shard);
          return loss;
        },
        saved, saved_columns, local_first);
    // The root's group holds every shard once.
    if (mesh.group_of(rank) == mesh.group_of(root)) {
      arma::Mat<T> w(rank == root ? k : 0, rank == root ? n : 0);
      plan->shard_group().gatherv(shard, w, counts, mesh.index_of(root));
      if (rank == root) result.w = std::move(w);
    }
    return result;
  }

  // FSDP: parameters, gradients and the optimizer state (none for SGD) sharded by columns.
  auto plan = resume ? std::make_unique<FsdpPlan<T>>(comm, shape, unplaced, root)
                     : std::make_unique<FsdpPlan<T>>(comm, shape, w0, root);
  arma::Mat<T>& shard = plan->shard();
  arma::Mat<T> gradient_shard = fresh_matrix<T>(k, shard.n_cols);
  const ParameterHold gradients = hold(comm, gradient_shard, true);
  OptimizerState<T> optimizer(config, k, shard.n_cols);
  const ParameterHold state(comm.stats(), optimizer.bytes(), true);
  std::vector<arma::Mat<T>*> saved{&shard};
  for (arma::Mat<T>* m : optimizer.state()) saved.push_back(m);
  if (resume) {
    result.bytes_read = load_columns<T>(comm, *resume, saved_columns, columns_from(saved, 0));
    optimizer.set_steps_taken(result.first_step);
  }
  arma::Mat<T> local_gradient = fresh_matrix<T>(k, n);
  const auto counts = scaled(shard_counts(n, p), k);
  run_steps(
      [&] {
        plan->execute_rows(x_rows.data, step_buffers.residual());  // all-gathers W, multiplies
        const double part = step_buffers.residual_from_output(t_rows.data);
        {
          const arma::Mat<T>& w = plan->gather();  // again, for the input gradient
          const ParameterHold gathered(comm.stats(), plan->gathered_bytes(), false);
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
      },
      saved, saved_columns, 0);
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

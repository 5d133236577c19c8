// The parts the built-in training steps share (train_step.hpp).
#include <cmath>
#include <span>

#include "distmm/plan.hpp"
#include "distmm/train_step.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
void TrainingStep<T>::count_plan(const MatmulPlan<T>& plan) {
  plan_allocated_ += plan.allocated_bytes();
  parameter_bytes_ += plan.parameter_bytes();
}

template <Element T>
RowShard<T> scatter_rows_t(Communicator& comm, const arma::Mat<T>& full_t, std::size_t m,
                           std::size_t w, int root, SetupMemory& memory) {
  const int p = comm.size();
  const Shard mine = shard_of(m, p, comm.rank());
  RowShard<T> out{};
  if (comm.rank() == root) {
    if (p > 1) comm.scatterv(full_t, scaled(shard_counts(m, p), w), in_place, root);
    out.data = full_t.memptr() == nullptr ? nullptr : full_t.memptr() + mine.offset * w;
    return out;
  }
  out.own = memory.matrix<T>(w, mine.count);
  comm.scatterv(std::span<const T>{}, scaled(shard_counts(m, p), w), out.own, root);
  out.data = out.own.memptr();
  return out;
}

template <Element T>
StepBuffers<T>::StepBuffers(Communicator& comm, const MatmulShape& s, std::size_t rows,
                            SetupMemory& memory)
    : comm_(comm),
      s_(s),
      rows_(rows),
      residual_t_(memory.matrix<T>(s.n, rows)),
      input_grad_t_(memory.matrix<T>(s.k, rows)),
      loss_(1) {}

template <Element T>
double StepBuffers<T>::residual_from_output(const T* t_rows_t) {
  if (comm_.stats().dry()) return 0;
  const arma::Mat<T> t(const_cast<T*>(t_rows_t), s_.n, rows_, false, true);
  residual_t_ -= t;
  const double part =
      0.5 * static_cast<double>(arma::accu(arma::square(residual_t_))) / static_cast<double>(s_.m);
  residual_t_ /= static_cast<T>(s_.m);
  return part;
}

template <Element T>
void StepBuffers<T>::input_gradient(const arma::Mat<T>& w) {
  record_multiply(comm_.stats(), timed_multiply(comm_.stats(), rows_, s_.n, s_.k, [&] {
                    gemm(false, false, s_.k, rows_, s_.n, w.memptr(), s_.k, residual_t_.memptr(),
                         s_.n, input_grad_t_.memptr(), s_.k);
                  }));
}

template <Element T>
void StepBuffers<T>::weight_gradient(const T* x_rows_t, arma::Mat<T>& g) {
  record_multiply(comm_.stats(), timed_multiply(comm_.stats(), s_.k, rows_, s_.n, [&] {
                    gemm(false, true, s_.k, s_.n, rows_, x_rows_t, s_.k, residual_t_.memptr(), s_.n,
                         g.memptr(), s_.k);
                  }));
}

template <Element T>
double StepBuffers<T>::allreduce_loss(double part) {
  loss_[0] = part;
  if (comm_.size() > 1) comm_.allreduce_sum(loss_);
  return loss_[0];
}

template <Element T>
RowBatch<T>::RowBatch(const TrainingSetup<T>& s, SetupMemory& memory)
    : x(scatter_rows_t(s.comm, s.x_t, s.shape.m, s.shape.k, s.root, memory)),
      t(scatter_rows_t(s.comm, s.t_t, s.shape.m, s.shape.n, s.root, memory)),
      rows(shard_of(s.shape.m, s.comm.size(), s.comm.rank()).count),
      buffers(s.comm, s.shape, rows, memory) {}

template <Element T>
OptimizerState<T>::OptimizerState(const TrainConfig& config, std::size_t rows, std::size_t cols,
                                  SetupMemory& memory)
    : config_(config), dry_(memory.dry()) {
  if (config.optimizer == Optimizer::adam) {
    m_ = memory.matrix<T>(rows, cols);
    v_ = memory.matrix<T>(rows, cols);
    if (!dry_) {
      m_.zeros();
      v_.zeros();
    }
  }
}

template <Element T>
std::vector<arma::Mat<T>*> OptimizerState<T>::state() {
  if (config_.optimizer == Optimizer::adam) return {&m_, &v_};
  return {};
}

template <Element T>
void OptimizerState<T>::step(arma::Mat<T>& w, const arma::Mat<T>& g) {
  if (dry_) return;
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

template <Element T>
std::vector<arma::Mat<T>*> with_state(arma::Mat<T>& parameters, OptimizerState<T>& optimizer) {
  std::vector<arma::Mat<T>*> out{&parameters};
  for (arma::Mat<T>* m : optimizer.state()) out.push_back(m);
  return out;
}

template <Element T>
std::uint64_t load_own(Communicator& comm, const Checkpoint& checkpoint, Shard columns,
                       const std::vector<arma::Mat<T>*>& matrices) {
  std::vector<T*> into;
  for (arma::Mat<T>* m : matrices) into.push_back(m->memptr());
  return load_columns<T>(comm, checkpoint, columns, into);
}

template <Element T>
std::uint64_t load_replicated(Communicator& comm, Communicator& group, const Checkpoint& checkpoint,
                              Shard part, const std::vector<arma::Mat<T>*>& matrices,
                              const std::vector<std::size_t>& counts) {
  if (group.size() == 1) return load_own(comm, checkpoint, part, matrices);
  std::vector<arma::Mat<T>> parts(matrices.size());
  std::vector<T*> into;
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    parts[i].set_size(matrices[i]->n_rows, part.count);
    into.push_back(parts[i].memptr());
  }
  const std::uint64_t read = load_columns<T>(comm, checkpoint, part, into);
  for (std::size_t i = 0; i < matrices.size(); ++i)
    group.allgatherv(parts[i], *matrices[i], counts);
  return read;
}

#define DISTMM_INSTANTIATE(T)                                                                    \
  template class TrainingStep<T>;                                                                \
  template class StepBuffers<T>;                                                                 \
  template struct RowBatch<T>;                                                                   \
  template class OptimizerState<T>;                                                              \
  template RowShard<T> scatter_rows_t(Communicator&, const arma::Mat<T>&, std::size_t,           \
                                      std::size_t, int, SetupMemory&);                           \
  template std::vector<arma::Mat<T>*> with_state(arma::Mat<T>&, OptimizerState<T>&);             \
  template std::uint64_t load_own(Communicator&, const Checkpoint&, Shard,                       \
                                  const std::vector<arma::Mat<T>*>&);                            \
  template std::uint64_t load_replicated(Communicator&, Communicator&, const Checkpoint&, Shard, \
                                         const std::vector<arma::Mat<T>*>&,                      \
                                         const std::vector<std::size_t>&);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm

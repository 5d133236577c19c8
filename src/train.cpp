#include "distmm/train.hpp"

#include <chrono>
#include <optional>
#include <span>
#include <string>

#include "distmm/checkpoint.hpp"
#include "distmm/error.hpp"
#include "distmm/train_step.hpp"
#include "local_multiply.hpp"

namespace distmm {

template <Element T>
TrainResultOf<T> train_single_process(const arma::Mat<T>& x, const arma::Mat<T>& t,
                                      const arma::Mat<T>& w0, const TrainConfig& config) {
  TrainResultOf<T> result{w0, {}, {}};
  const T m = static_cast<T>(x.n_rows);
  const RankStats stats;
  SetupMemory memory(stats);
  OptimizerState<T> optimizer(config, w0.n_rows, w0.n_cols, memory);
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

CheckpointMeta checkpoint_meta(const Strategy& strategy, const Communicator& comm,
                               const MatmulShape& shape, const TrainConfig& c) {
  CheckpointMeta meta;
  meta.strategy = std::string(strategy.name());
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

// The checkpoint to resume from, checked against this run; nullopt without one.
std::optional<Checkpoint> checkpoint_to_resume(Communicator& comm, const CheckpointMeta& meta,
                                               const TrainConfig& config) {
  if (config.checkpoint.resume.empty()) return std::nullopt;
  Checkpoint resume = open_checkpoint(comm, config.checkpoint.resume, meta);
  if (resume.meta.step >= config.steps) {
    throw InputError("--steps " + std::to_string(config.steps) + ": checkpoint " +
                         resume.dir.string() + " is at step " + std::to_string(resume.meta.step) +
                         ", so nothing is left to run (--steps counts from the start of "
                         "training)",
                     comm.rank(), "--steps");
  }
  return resume;
}

// Saves the step's blocks as checkpoint `meta.step` into the result's figures. A save's own
// messages are not a training step's: the counters are put back.
template <Element T>
void save(Communicator& comm, TrainingStep<T>& step, CheckpointMeta& meta,
          const CheckpointConfig& ckc, TrainResultOf<T>& result) {
  const RankStats counted = comm.stats();
  const SavedBlocks<T> blocks = step.saved();
  std::vector<const T*> sections;
  for (arma::Mat<T>* m : blocks.matrices) {
    sections.push_back(m->memptr() + blocks.local_first * m->n_rows);
  }
  const SaveFigures f =
      save_checkpoint<T>(comm, ckc.save_dir, meta, std::span<const T* const>(sections), ckc.keep,
                         blocks.block(meta.shape.k));
  comm.stats() = counted;
  result.saved.push_back(f.committed.string());
  result.bytes_written += f.bytes_written;
  result.save_seconds += f.seconds;
}

}  // namespace

template <Element T>
TrainResultOf<T> train_linear(const Strategy& strategy, Communicator& comm,
                              const MatmulShape& shape, const arma::Mat<T>& x,
                              const arma::Mat<T>& t, const arma::Mat<T>& w0,
                              const TrainConfig& config,
                              const std::function<void(std::size_t, double)>& on_step, int root) {
  const int rank = comm.rank();
  if (!strategy.trains()) {
    throw InputError("train: strategy " + std::string(strategy.name()) +
                         " is not a training strategy (use " + strategy_names(true) + ")",
                     rank, "--strategy");
  }
  const CheckpointConfig& ckc = config.checkpoint;
  CheckpointMeta meta = checkpoint_meta(strategy, comm, shape, config);
  meta.dtype = data_type_of<T>();
  TrainResultOf<T> result;
  const std::optional<Checkpoint> resume = checkpoint_to_resume(comm, meta, config);
  if (resume) {
    result.first_step = resume->meta.step;
    result.resumed_from = resume->dir.string();
  }
  if (!ckc.save_dir.empty()) check_save_dir(comm, ckc.save_dir, result.first_step);
  if (rank == root) {
    check_operand(x, shape.m, shape.k, "train: X", rank);
    check_operand(t, shape.m, shape.n, "train: T", rank);
    if (!resume) check_operand(w0, shape.k, shape.n, "train: W", rank);
  }
  // Row-major X and T (their transposes), so each rank's rows are one block.
  const arma::Mat<T> x_t = rank == root ? arma::Mat<T>(x.t()) : arma::Mat<T>();
  const arma::Mat<T> t_t = rank == root ? arma::Mat<T>(t.t()) : arma::Mat<T>();
  const TrainingSetup<T> setup{comm,   shape,          x_t, t_t, w0, resume.has_value(), root,
                               config, config.settings};
  const auto step = strategy.training_step(setup);
  if (resume) result.bytes_read = step->load(*resume);
  result.data_rows = step->data_rows();
  result.optimizer_state_bytes = step->optimizer_state_bytes();
  // Every rank's setup done before the first step is timed: the tail of the setup's scatters
  // to far ranks (bytes still in flight when the root's sends returned) is not the step's.
  // The counters from here on describe the training steps (setup excluded).
  comm.barrier();
  comm.stats().reset();
  for (std::size_t s = result.first_step; s < config.steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    const double loss = step->step();
    result.step_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    result.losses.push_back(loss);
    if (on_step) on_step(s, loss);
    const std::size_t done = s + 1;
    if (!ckc.save_dir.empty() &&
        (done == config.steps || (ckc.every > 0 && done % ckc.every == 0))) {
      meta.step = done;
      save(comm, *step, meta, ckc, result);
    }
  }
  result.w = step->gather_parameters();
  return result;
}

#define DISTMM_INSTANTIATE(T)                                                                \
  template TrainResultOf<T> train_single_process(const arma::Mat<T>&, const arma::Mat<T>&,   \
                                                 const arma::Mat<T>&, const TrainConfig&);   \
  template TrainResultOf<T> train_linear(const Strategy&, Communicator&, const MatmulShape&, \
                                         const arma::Mat<T>&, const arma::Mat<T>&,           \
                                         const arma::Mat<T>&, const TrainConfig&,            \
                                         const std::function<void(std::size_t, double)>&, int);
DISTMM_INSTANTIATE(double)
DISTMM_INSTANTIATE(float)
#undef DISTMM_INSTANTIATE

}  // namespace distmm

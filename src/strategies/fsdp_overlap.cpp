#include "distmm/strategies/fsdp_overlap.hpp"

#include <functional>

#include "distmm/strategies/fsdp.hpp"
#include "helper_thread.hpp"
#include "local_multiply.hpp"

#include "distmm/strategy_of.hpp"
#include "strategies/builtin.hpp"
#include "strategies/row_distributed.hpp"

namespace distmm {
namespace {

// Ring buffers a rank needs besides its own shard: none alone, one for two ranks (the only
// incoming shard), two from three ranks on (receive the next while multiplying the current).
std::size_t ring_buffers_for(int ranks) {
  return ranks > 2 ? 2 : (ranks == 2 ? 1 : 0);
}

}  // namespace

template <Element T>
FsdpOverlapPlan<T>::FsdpOverlapPlan(Communicator& comm, const MatmulShape& shape,
                                    const arma::Mat<T>& b, int root)
    : FsdpOverlapPlan(comm, shape, unplaced, root) {
  scatter_column_shards(comm, shape, b, shard_, root);
}

template <Element T>
FsdpOverlapPlan<T>::FsdpOverlapPlan(Communicator& comm, const MatmulShape& shape, Unplaced,
                                    int root)
    : RowShardedPlan<T>(comm, shape, root),
      shard_(this->allocate_parameters(shape.k, shard_of(shape.n, comm.size(), comm.rank()).count)),
      ring_buffers_(ring_buffers_for(comm.size())),
      held_(comm.stats(), shard_.n_elem * sizeof(T), true),
      // A dry run multiplies nothing: no thread to hand it to.
      helper_(comm.stats().dry() ? nullptr : std::make_unique<HelperThread>()) {
  const std::size_t widest = shard_of(shape.n, comm.size(), 0).count;
  for (std::size_t i = 0; i < ring_buffers_; ++i) ring_[i] = this->allocate(shape.k, widest);
}

template <Element T>
FsdpOverlapPlan<T>::~FsdpOverlapPlan() = default;

template <Element T>
void FsdpOverlapPlan<T>::multiply_rows(const T* a_rows_t, T* c_rows_t) {
  Communicator& comm = this->comm();
  RankStats& stats = comm.stats();
  const int p = comm.size(), r = comm.rank();
  const std::size_t k = this->shape().k, n = this->shape().n, rows = this->rows().count;
  const ParameterHold ring(stats, ring_buffers_ * ring_[0].n_elem * sizeof(T), false);

  const T* current = shard_.memptr();
  TraceEvent multiply;
  Shard cols;
  // The task reads `current` and `cols` as set before each run().
  const std::function<void()> task = [&] {
    // A dry run's C, and the C of a rank holding no rows, has no memory behind it: no offset
    // into it (UB on a null pointer; clang's UBSan reports it).
    T* into = c_rows_t == nullptr ? nullptr : c_rows_t + cols.offset;
    multiply = rows_times_columns(stats, rows, k, cols.count, a_rows_t, current, into, n);
  };
  for (int t = 0; t < p; ++t) {
    const int owner = ((r - t) % p + p) % p;  // whose shard `current` is
    cols = shard_of(n, p, owner);
    if (helper_) {
      helper_->run(task);
    } else {
      task();
    }
    const T* next = current;
    if (t + 1 < p) {
      // From the ring predecessor arrives the shard of rank (r - t - 1) mod P.
      const int incoming_owner = ((r - t - 1) % p + p) % p;
      arma::Mat<T>& into = ring_[t % 2 == 0 || ring_buffers_ < 2 ? 0 : 1];
      const std::size_t incoming = k * shard_of(n, p, incoming_owner).count;
      try {
        comm.sendrecv(std::span<const T>(current, k * cols.count), (r + 1) % p, t,
                      std::span<T>(into.memptr(), incoming), (r + p - 1) % p, t);
      } catch (...) {
        if (helper_) helper_->wait_before_unwinding();
        throw;
      }
      next = into.memptr();
    }
    if (helper_) helper_->wait();
    multiply.overlapped = t + 1 < p;  // beside this step's sendrecv
    record_multiply(stats, multiply);
    current = next;
  }
}

template class FsdpOverlapPlan<double>;
template class FsdpOverlapPlan<float>;

namespace {

class FsdpOverlapStrategy final : public RowShardedStrategy<FsdpOverlapStrategy, FsdpOverlapPlan> {
 public:
  std::string_view name() const override { return "fsdp-overlap"; }
  std::string_view description() const override {
    return "fsdp with the all-gather replaced by a ring whose next shard arrives during the "
           "multiply";
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings&) const {
    return std::make_unique<FsdpOverlapPlan<T>>(comm, shape, b, root);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp_overlap_strategy() {
  return std::make_unique<FsdpOverlapStrategy>();
}

}  // namespace distmm

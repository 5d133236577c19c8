// A strategy from outside distmm, first-class: it registers itself and then runs as the
// distmm program, with everything the built-in strategies have and no code of its own for
// it: verification against A * B, the table, --report, --trace, --dry-run, and --model's
// predicted time (all of them follow from running its plan, for real or dry).
//
// fsdp-bcast: FSDP (B sharded by columns, A and C by rows) whose B is gathered by P
// broadcasts, one from each shard's owner, instead of one all-gather: the way a parameter
// gather is written without an all-gather collective. It moves the same bytes as fsdp's
// all-gather, in P rooted steps, each waiting for its owner.
//
//            rank 0            rank 1            rank 2
//   setup    B:,0              B:,1              B:,2          scatterv: persistent shards
//   ---- each execution ----
//   scatterv A0 (stays)        A1                A2
//   bcast    B:,0 from 0 ->    B:,0              B:,0
//   bcast    B:,1              <- B:,1 from 1 -> B:,1
//   bcast    B:,2              B:,2              <- B:,2 from 2
//   multiply C0 = A0 B         C1 = A1 B         C2 = A2 B
//   gatherv  C = [C0;C1;C2]    -                 -
//
//   custom_strategy --strategy fsdp-bcast --ranks 4                # simulator, verified
//   mpirun -np 4 custom_strategy --strategy fsdp-bcast --report r.json
//   custom_strategy --strategy all --dry-run --ranks 64 --model MODEL.json
#include <distmm/plan.hpp>
#include <distmm/program.hpp>
#include <distmm/sharding.hpp>
#include <distmm/stats.hpp>
#include <distmm/strategy_of.hpp>

#include <algorithm>
#include <armadillo>
#include <memory>
#include <optional>
#include <span>

namespace {

template <distmm::Element T>
class BroadcastGatherPlan final : public distmm::RowShardedPlan<T> {
 public:
  // Scatters B's column shards (B k x n, read on `root` only). Collective.
  BroadcastGatherPlan(distmm::Communicator& comm, const distmm::MatmulShape& shape,
                      const arma::Mat<T>& b, int root)
      : distmm::RowShardedPlan<T>(comm, shape, root),
        shard_(this->allocate_parameters(shape.k, columns(comm.rank()).count)),
        // One rank's shard is all of B: nothing to gather into.
        full_(comm.size() > 1 ? this->allocate(shape.k, shape.n) : arma::Mat<T>()),
        held_(comm.stats(), shard_.n_elem * sizeof(T), true) {
    const bool dry = comm.stats().dry();  // a dry run's matrices have no memory behind them
    if (comm.size() == 1) {
      if (!dry) shard_ = b;
      return;
    }
    // A column shard of column-major B is contiguous: B's storage is the scatterv buffer.
    const auto counts = distmm::scaled(distmm::shard_counts(shape.n, comm.size()), shape.k);
    if (comm.rank() == root) {
      comm.scatterv(std::span<const T>(b.memptr(), b.n_elem), counts, shard_, root);
    } else {
      comm.scatterv(std::span<const T>{}, counts, shard_, root);
    }
  }

 private:
  distmm::Shard columns(int rank) const {
    return distmm::shard_of(this->shape().n, this->comm().size(), rank);
  }

  void multiply_rows(const T* a_rows_t, T* c_rows_t) override {
    distmm::Communicator& comm = this->comm();
    const std::size_t k = this->shape().k, n = this->shape().n, rows = this->rows().count;
    const arma::Mat<T>* b = &shard_;
    // The gathered B counts as held parameters while it is in use.
    std::optional<distmm::ParameterHold> gathered;
    if (comm.size() > 1) {
      gathered.emplace(comm.stats(), full_.n_elem * sizeof(T), false);
      for (int owner = 0; owner < comm.size(); ++owner) {
        const distmm::Shard cols = columns(owner);
        const std::span<T> block(full_.memptr() + cols.offset * k, cols.count * k);
        if (owner == comm.rank() && !comm.stats().dry()) {
          std::copy(shard_.begin(), shard_.end(), block.begin());
        }
        comm.broadcast(block, owner);
      }
      b = &full_;
    }
    // C_r^T (n x rows) = B^T A_r^T, into the caller's buffer.
    this->multiply(rows, k, n, [&] {
      const arma::Mat<T> a_t(const_cast<T*>(a_rows_t), k, rows, false, true);
      arma::Mat<T> c_t(c_rows_t, n, rows, false, true);
      c_t = b->t() * a_t;
    });
  }

  arma::Mat<T> shard_, full_;
  distmm::ParameterHold held_;
};

class BroadcastGather final : public distmm::StrategyOf<BroadcastGather> {
 public:
  std::string_view name() const override { return "fsdp-bcast"; }
  std::string_view description() const override {
    return "fsdp gathering B by one broadcast from each shard's owner (examples/)";
  }
  template <distmm::Element T>
  std::unique_ptr<distmm::MatmulPlan<T>> make_plan(distmm::Communicator& comm,
                                                   const distmm::MatmulShape& shape,
                                                   const arma::Mat<T>& b, int root,
                                                   const distmm::StrategySettings&) const {
    return std::make_unique<BroadcastGatherPlan<T>>(comm, shape, b, root);
  }
};

}  // namespace

int main(int argc, char** argv) {
  distmm::register_strategy(std::make_unique<BroadcastGather>());
  return distmm::run_program(argc, argv);
}

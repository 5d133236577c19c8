#include "distmm/strategies/hsdp.hpp"

#include <string>

#include "distmm/error.hpp"
#include "distmm/layout.hpp"
#include "distmm/memory.hpp"
#include "distmm/strategies/fsdp.hpp"
#include "distmm/strategy_of.hpp"
#include "local_multiply.hpp"
#include "strategies/builtin.hpp"
#include "strategies/column_shards.hpp"

namespace distmm {

Mesh make_mesh(int ranks, int replicas) {
  if (replicas < 1 || ranks % replicas != 0) {
    throw InputError("--replicas " + std::to_string(replicas) + ": does not divide the " +
                         std::to_string(ranks) + " ranks (hsdp's mesh is replicas x shards)",
                     -1, "--replicas");
  }
  return Mesh{replicas, ranks / replicas};
}

template <Element T>
HsdpPlan<T>::HsdpPlan(Communicator& comm, const MatmulShape& shape, Unplaced, int replicas,
                      int root)
    : RowShardedPlan<T>(comm, shape, root),
      mesh_(make_mesh(comm.size(), replicas)),
      shard_comm_(comm.split([m = mesh_](int r) {
        return Communicator::ColorKey{m.group_of(r), m.index_of(r)};
      })),
      replica_comm_(comm.split([m = mesh_](int r) {
        return Communicator::ColorKey{m.index_of(r), m.group_of(r)};
      })),
      shard_(this->allocate_parameters(shape.k, columns().count)),
      // A group of one holds all of B: nothing to gather into.
      full_(mesh_.group_size > 1 ? this->allocate(shape.k, shape.n) : arma::Mat<T>()),
      counts_(scaled(shard_counts(shape.n, mesh_.group_size), shape.k)),
      held_(comm.stats(), shard_.n_elem * sizeof(T), true) {}

template <Element T>
HsdpPlan<T>::HsdpPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b,
                      int replicas, int root)
    : HsdpPlan(comm, shape, unplaced, replicas, root) {
  // The root's group receives the shards; then each shard goes to its replicas.
  if (mesh_.group_of(comm.rank()) == mesh_.group_of(root)) {
    scatter_column_shards(*shard_comm_, shape, b, shard_, mesh_.index_of(root));
  }
  if (mesh_.replicas > 1) replica_comm_->broadcast(shard_, mesh_.group_of(root));
}

template <Element T>
const arma::Mat<T>& HsdpPlan<T>::gather() {
  return gather_columns(*shard_comm_, shard_, full_, counts_);
}

template <Element T>
void HsdpPlan<T>::multiply_rows(const T* a_rows_t, T* c_rows_t) {
  multiply_by_gathered(this->comm().stats(), this->shape(), this->rows().count, gather(),
                       gathered_bytes(), a_rows_t, c_rows_t);
}

template class HsdpPlan<double>;
template class HsdpPlan<float>;

namespace {

// The distributed layout: rank r has A's and C's rows R_r (over all P ranks) and, of B, part g
// of its shard's columns (g its replica group): shard i's columns are split over the R ranks
// that hold shard i, so every column is on one rank.
BlockLayout hsdp_blocks(const MatmulShape& s, int ranks, int rank, int replicas) {
  const Mesh mesh = make_mesh(ranks, replicas);
  const Shard rows = shard_of(s.m, ranks, rank);
  const Shard shard = shard_of(s.n, mesh.group_size, mesh.index_of(rank));
  const Shard part = shard_of(shard.count, mesh.replicas, mesh.group_of(rank));
  return {{rows.offset, rows.count, 0, s.k},
          {0, s.k, shard.offset + part.offset, part.count},
          {rows.offset, rows.count, 0, s.n}};
}

// Each execution first all-gathers the shard from its R replicas (the copy the root layout
// makes once at setup), then runs as the root layout's rows path: the all-gather of B within
// the shard group and the multiply.
template <Element T>
class HsdpDistributedPlan final : public DistributedPlan<T> {
 public:
  HsdpDistributedPlan(Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block,
                      int replicas)
      : DistributedPlan<T>(comm, shape, hsdp_blocks(shape, comm.size(), comm.rank(), replicas)),
        plan_(comm, shape, unplaced, replicas),
        parts_(scaled(shard_counts(plan_.columns().count, replicas), shape.k)) {
    const Block& b = this->blocks().b;
    check_operand(b_block, b.rows, b.cols, "B's block", comm.rank());
    part_ = comm.stats().dry() ? no_memory_matrix<T>(b.rows, b.cols) : arma::Mat<T>(b_block);
    this->count_allocated(plan_.allocated_bytes() + part_.n_elem * sizeof(T));
  }
  void execute(const arma::Mat<T>& a_t, arma::Mat<T>& c_t) override {
    this->check_blocks(a_t, c_t);
    if (plan_.mesh().replicas > 1) {
      plan_.replica_group().allgatherv(part_, plan_.shard(), parts_);
    } else if (!this->comm().stats().dry()) {
      std::copy(part_.begin(), part_.end(), plan_.shard().begin());
    }
    plan_.execute_rows(a_t.memptr(), c_t.memptr());
  }

 private:
  HsdpPlan<T> plan_;
  std::vector<std::size_t> parts_;  // the replicas' parts of the shard
  arma::Mat<T> part_;
};

// HSDP's training step: W sharded by columns within each shard group of S ranks as under FSDP,
// replicated across the R groups; X by rows over all P ranks. Per step as FSDP within the
// group (two all-gathers, a reduce-scatter of the gradient), then an all-reduce of the
// gradient shard across the R replicas (as FSDP2's HSDP does): every rank's shard gets the sum
// over all P. A checkpoint holds each shard once: its R replicas each save a part of it.
template <Element T>
class HsdpStep final : public TrainingStep<T> {
 public:
  HsdpStep(const TrainingSetup<T>& s, int replicas)
      : TrainingStep<T>(s.comm),
        comm_(s.comm),
        root_(s.root),
        batch_(s, this->memory()),
        plan_(s.resuming
                  ? std::make_unique<HsdpPlan<T>>(s.comm, s.shape, unplaced, replicas, s.root)
                  : std::make_unique<HsdpPlan<T>>(s.comm, s.shape, s.w0, replicas, s.root)),
        mesh_(plan_->mesh()),
        gradient_shard_(this->memory().template matrix<T>(s.shape.k, plan_->columns().count)),
        gradient_hold_(hold(s.comm, gradient_shard_, true)),
        optimizer_(s.config, s.shape.k, plan_->columns().count, this->memory()),
        state_hold_(s.comm.stats(), optimizer_.bytes(), true),
        // A group of one computes the gradient of all of W, its shard: nothing to
        // reduce-scatter.
        local_gradient_(mesh_.group_size > 1
                            ? this->memory().template matrix<T>(s.shape.k, s.shape.n)
                            : arma::Mat<T>()),
        counts_(scaled(shard_counts(s.shape.n, mesh_.group_size), s.shape.k)) {
    this->count_plan(*plan_);
    this->count_optimizer_state(optimizer_.bytes());
  }

  double step() override {
    const bool grouped = mesh_.group_size > 1;
    plan_->execute_rows(batch_.x.data, batch_.buffers.residual());  // all-gathers W, multiplies
    const double part = batch_.buffers.residual_from_output(batch_.t.data);
    {
      const arma::Mat<T>& w = plan_->gather();  // again, for the input gradient
      const ParameterHold gathered(comm_.stats(), grouped ? plan_->gathered_bytes() : 0, false);
      batch_.buffers.input_gradient(w);
    }
    if (grouped) {
      const ParameterHold unsharded = hold(comm_, local_gradient_, false);
      batch_.buffers.weight_gradient(batch_.x.data, local_gradient_);
      plan_->shard_group().reduce_scatter_sum(local_gradient_, gradient_shard_, counts_);
    } else {
      batch_.buffers.weight_gradient(batch_.x.data, gradient_shard_);
    }
    if (mesh_.replicas > 1) plan_->replica_group().allreduce_sum(gradient_shard_);
    const double loss = batch_.buffers.allreduce_loss(part);
    optimizer_.step(plan_->shard(), gradient_shard_);
    return loss;
  }
  // The R replicas of shard i each save part shard_of(n_i, R, g) of it.
  SavedBlocks<T> saved() override {
    const Shard shard = plan_->columns();
    const Shard part = shard_of(shard.count, mesh_.replicas, mesh_.group_of(comm_.rank()));
    return {with_state(plan_->shard(), optimizer_),
            {shard.offset + part.offset, part.count},
            part.offset};
  }
  // Each replica reads its part of the shard; the all-gather across the replicas completes it.
  std::uint64_t load(const Checkpoint& checkpoint) override {
    const SavedBlocks<T> blocks = saved();
    const std::uint64_t read = load_replicated(
        comm_, plan_->replica_group(), checkpoint, blocks.columns, blocks.matrices,
        scaled(shard_counts(plan_->columns().count, mesh_.replicas), plan_->shape().k));
    optimizer_.set_steps_taken(checkpoint.meta.step);
    return read;
  }
  // The root's group holds every shard once.
  arma::Mat<T> gather_parameters() override {
    const int rank = comm_.rank();
    arma::Mat<T> w;
    if (mesh_.group_of(rank) == mesh_.group_of(root_)) {
      w.set_size(rank == root_ ? plan_->shape().k : 0, rank == root_ ? plan_->shape().n : 0);
      plan_->shard_group().gatherv(plan_->shard(), w, counts_, mesh_.index_of(root_));
    }
    return w;
  }
  std::size_t data_rows() const override { return batch_.rows; }

 private:
  Communicator& comm_;
  int root_;
  RowBatch<T> batch_;
  std::unique_ptr<HsdpPlan<T>> plan_;
  Mesh mesh_;
  arma::Mat<T> gradient_shard_;
  ParameterHold gradient_hold_;
  OptimizerState<T> optimizer_;
  ParameterHold state_hold_;
  arma::Mat<T> local_gradient_;
  std::vector<std::size_t> counts_;
};

// hsdp's one option, --replicas R: the mesh's replica groups. Its default is one group per
// host (the all-gathers then stay within a host) where the hosts divide the ranks, else 1.
class HsdpStrategy final : public StrategyOf<HsdpStrategy> {
 public:
  std::string_view name() const override { return "hsdp"; }
  std::string_view description() const override {
    return "hybrid sharded data parallel: fsdp within each of R replica groups, the groups "
           "replicas of one another";
  }
  std::vector<StrategyOption> options() const override {
    return {{"replicas", "R",
             "hsdp: replica groups R of the R x S mesh, dividing the ranks (default: the "
             "number of hosts if it divides the ranks, else 1)"}};
  }
  StrategySettings settle(const StrategySettings& given, const RunPlacement& where) const override {
    const int hosts = std::max(1, where.hosts);
    const int fallback = where.ranks % hosts == 0 ? hosts : 1;
    const int replicas = given.integer("replicas", fallback);
    make_mesh(where.ranks, replicas);  // throws, naming --replicas, unless R divides the ranks
    return {{"replicas", std::to_string(replicas)}};
  }
  std::string label(const StrategySettings& settled) const override {
    return "hsdp R=" + std::to_string(settled.integer("replicas", 1));
  }
  template <Element T>
  std::unique_ptr<MatmulPlan<T>> make_plan(Communicator& comm, const MatmulShape& shape,
                                           const arma::Mat<T>& b, int root,
                                           const StrategySettings& settings) const {
    return std::make_unique<HsdpPlan<T>>(comm, shape, b, settings.integer("replicas", 1), root);
  }
  std::optional<BlockLayout> distributed_blocks(const MatmulShape& shape, int ranks, int rank,
                                                const StrategySettings& settings) const override {
    return hsdp_blocks(shape, ranks, rank, settings.integer("replicas", 1));
  }
  template <Element T>
  std::unique_ptr<DistributedPlan<T>> make_distributed_plan(
      Communicator& comm, const MatmulShape& shape, const arma::Mat<T>& b_block,
      const StrategySettings& settings) const {
    return std::make_unique<HsdpDistributedPlan<T>>(comm, shape, b_block,
                                                    settings.integer("replicas", 1));
  }
  template <Element T>
  std::unique_ptr<TrainingStep<T>> make_training_step(const TrainingSetup<T>& setup) const {
    const int replicas = setup.settings.integer("replicas", 1);
    make_mesh(setup.comm.size(), replicas);  // throws on every rank unless R divides P
    if (setup.comm.size() == 1) return dp_training_step(setup);
    return std::make_unique<HsdpStep<T>>(setup, replicas);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_hsdp_strategy() {
  return std::make_unique<HsdpStrategy>();
}

}  // namespace distmm

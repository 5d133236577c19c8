#pragma once
// A dry run: a strategy's own code, run one rank at a time on a communicator that moves no
// data. Its plan allocates matrices with no memory behind them (MatmulPlan::allocate), its
// multiplies are recorded and not run, and every call is counted as a real run counts it. So
// the counters, the memory, and the events the time model replays all follow from the one
// description of a strategy that runs for real: its plan. A shape of 10^6 x 10^6 on 4096
// ranks costs what the calls cost to record.
//
//   real run    rank 0 ... rank P-1 at once      data moves       RankStats: counters, trace
//   dry run     rank 0, then 1, ..., then P-1    nothing moves    the same RankStats
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"
#include "distmm/sharding.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"

namespace distmm {

// One rank of a world of `size` (or of a communicator split from it) in a dry run: every call
// returns at once, having moved nothing; RankStats::dry() is set. Splits must say every
// rank's color (Communicator::split(of)): a dry rank knows no other rank's.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(int rank, int size);
  // A communicator over world ranks `members`, of which this is rank `rank`.
  RecordingCommunicator(int rank, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return "dry run"; }
  std::string host() const override { return "dry run"; }
  std::vector<int> world_ranks() const override { return members_; }

 protected:
  void do_barrier() override {}
  std::unique_ptr<Communicator> do_split(int color, int key) override;
  std::unique_ptr<Communicator> do_split_known(const std::function<ColorKey(int)>& of) override;
  void do_send(ConstBuffer, int, int) override {}
  void do_recv(Buffer, int, int) override {}
  void do_sendrecv(ConstBuffer, int, int, Buffer, int, int) override {}
  void do_broadcast(Buffer, int) override {}
  void do_scatterv(ConstBuffer, std::span<const std::size_t>, Buffer, int) override {}
  void do_gatherv(ConstBuffer, Buffer, std::span<const std::size_t>, int) override {}
  void do_scatterv_columns(ConstBuffer, RowMajor, std::span<const std::size_t>, Buffer,
                           int) override {}
  void do_gatherv_columns(ConstBuffer, Buffer, RowMajor, std::span<const std::size_t>,
                          int) override {}
  void do_allgatherv(ConstBuffer, Buffer, std::span<const std::size_t>) override {}
  void do_allreduce_sum(Buffer) override {}
  void do_reduce_sum(Buffer, int) override {}
  void do_reduce_scatter_sum(ConstBuffer, Buffer, std::span<const std::size_t>) override {}

 private:
  int rank_;
  std::vector<int> members_;
};

// One event of a rank's run as the model replays it: a recorded TraceEvent, its communicator
// named by the run's group index.
struct PlannedEvent {
  OpKind op = OpKind::compute;
  int group = 0;                                     // index into the run's groups (0: every rank)
  int root = -1;                                     // in the group
  std::uint64_t bytes_sent = 0, bytes_received = 0;  // by this rank, as the counters count
  std::uint64_t total_bytes = 0;  // the collective's whole size (gathered, reduced, ...)
  std::uint64_t rows = 0, inner = 0, cols = 0;  // compute: rows x inner times inner x cols
  int peer_to = -1, peer_from = -1;             // sendrecv: world ranks
  bool overlapped = false;  // compute on a helper thread alongside the next communication
  // The bytes are in the caller's buffers (the root's A or C), not the plan's: the root's
  // side of a rooted collective of an execution.
  bool caller_buffers = false;
  // The root's buffer holds columns of a row-major matrix (scatterv_columns/gatherv_columns):
  // packed or unpacked, or copied with a stride, element by element.
  bool strided = false;
  std::uint64_t row_bytes = 0;  // strided: the length of the matrix's rows
  // strided, at the root: the bytes of its matrix copied with a stride, in how many blocks
  std::uint64_t strided_bytes = 0, strided_blocks = 0;
  bool execution_start = false;  // the first event of an execution (or a training step)
  bool operator==(const PlannedEvent&) const = default;
};

// A rank's events, with repeats folded (fsdp-overlap's P ring steps on each of P ranks would
// otherwise be P^2 events): runs of a block of up to four events repeated.
class EventStream {
 public:
  explicit EventStream(const std::vector<PlannedEvent>& events);
  // The events [0, from) once, then [from, end) `times` times over (a plan's setup, then as
  // many executions as it records: each the same).
  EventStream(const std::vector<PlannedEvent>& events, std::size_t from, std::size_t times);
  EventStream() = default;
  std::size_t size() const { return size_; }
  // Reads the events in order.
  class Cursor {
   public:
    explicit Cursor(const EventStream& s) : s_(&s) {}
    bool done() const { return run_ >= s_->runs_.size(); }
    const PlannedEvent& operator*() const;
    const PlannedEvent* operator->() const { return &**this; }
    // The event `ahead` places on (0: this one), or nullptr past the end.
    const PlannedEvent* peek(std::size_t ahead) const;
    Cursor& operator++();

   private:
    const EventStream* s_;
    std::size_t run_ = 0, repeat_ = 0, at_ = 0;
  };
  std::vector<PlannedEvent> expand() const;

 private:
  struct Run {
    std::size_t first = 0, length = 0, repeats = 0;  // events_[first, first + length) repeated
  };
  // Appends events [begin, end), repeats folded.
  void fold(const std::vector<PlannedEvent>& events, std::size_t begin, std::size_t end);

  std::vector<PlannedEvent> events_;
  std::vector<Run> runs_;
  std::size_t size_ = 0;
};

// What one rank did in a dry run: its counters over the setup and the first execution (what
// a real run's stats say after one), its plan's memory, its events.
struct DryRank {
  OpCounters communication;  // every call but multiplies
  std::uint64_t persistent_param_bytes = 0, peak_param_bytes = 0;
  std::uint64_t allocated_bytes = 0, parameter_bytes = 0;
  EventStream events;
  // A training step's: the block of W the rank saves in a checkpoint, its rows of X, its
  // optimizer state (in persistent_param_bytes too).
  Block saved_block;
  std::size_t data_rows = 0;
  std::uint64_t optimizer_state_bytes = 0;
};

struct DryRun {
  std::vector<std::vector<int>> groups;  // world ranks of each communicator, in order (0: all)
  std::vector<std::string> group_names;  // as Communicator::name() says
  std::vector<DryRank> ranks;
};

// Runs strategy `s`'s plan dry on every rank of `ranks`: setup, then one execution, whose
// events the streams hold `executions` times over (every execution of a plan is the same);
// rank 0 the root. `settings` as make_plan's. `distributed`: the distributed layout's plan
// (layout.hpp), each rank from its own blocks (InputError if the strategy has none).
DryRun dry_run(const Strategy& s, const MatmulShape& shape, int ranks, DataType type,
               const StrategySettings& settings, std::size_t executions, bool distributed = false);

// Runs strategy `s`'s training step dry on every rank: its setup (not in the events or the
// counters, as train_linear() does not count it), then one step, whose events the streams
// hold `steps` times over. InputError for a strategy that does not train.
DryRun dry_train(const Strategy& s, const MatmulShape& shape, int ranks, DataType type,
                 const TrainConfig& config, std::size_t steps);

}  // namespace distmm

#pragma once
// What one rank did: kept by the Communicator itself (the same code for every backend), so
// strategies never count. Bytes are counted as data crosses between ranks: a broadcast to
// P-1 ranks counts (P-1) x its size sent at the root and its size received at each other
// rank; what a rank keeps for itself is not counted, so over all ranks bytes sent equal bytes
// received. A message is one non-empty payload from one rank to another.
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace distmm {

enum class OpKind : int {
  send,
  recv,
  sendrecv,
  barrier,
  broadcast,
  scatterv,
  gatherv,
  allgatherv,
  allreduce,
  reduce_scatter,
  reduce,
  compute,  // a local multiply
  split,    // Communicator::split (counted as a call; its colors and keys carry no payload)
};
inline constexpr int kOpKinds = 13;
std::string_view name_of(OpKind op);

// The median of a list (the mean of the middle two for an even count; 0 for none).
double median(std::vector<double> values);

struct OpCounters {
  std::uint64_t calls = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  double seconds = 0;  // wall time inside the calls
  // What a ring algorithm puts on the wire per rank, by NCCL-tests' bus-bandwidth factors:
  // all-reduce 2(P-1)/P, all-gather, reduce-scatter, scatter and gather (P-1)/P of the full
  // size, broadcast 1x; point-to-point its payload.
  double ring_bytes = 0;
  double flops = 0;  // compute only
};

// One span of the timeline: a communication call or a local multiply.
struct TraceEvent {
  OpKind op = OpKind::compute;
  double start_s = 0;  // since the stats' clock was started
  double duration_s = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  // Shape of a local multiply (rows x inner times inner x cols), or the root of a collective.
  std::uint64_t rows = 0, inner = 0, cols = 0;
  int root = -1;
  int comm = 0;  // the communicator, as an index into RankStats::communicators() (0: world)
  // What the time model needs beyond the counters (model.hpp):
  std::uint64_t total_bytes = 0;  // a collective's whole size (gathered, reduced, broadcast)
  // The columns forms: the root's buffer is a row-major matrix whose rows are this long,
  // packed or unpacked element by element (0: contiguous blocks).
  std::uint64_t row_bytes = 0;
  // The columns forms at their root: the bytes of its matrix copied with a stride (every
  // member's columns, its own unless in place) and in how many blocks.
  std::uint64_t strided_bytes = 0, strided_blocks = 0;
  int peer_to = -1, peer_from = -1;  // sendrecv: the destination and the source (comm's ranks)
  bool overlapped = false;           // a multiply on a helper thread beside the next communication
};

class RankStats {
 public:
  using Clock = std::chrono::steady_clock;

  // Zeroes every counter and restarts the clock (call it on every rank right after a
  // barrier, so the ranks' timelines line up).
  void reset();

  const OpCounters& op(OpKind k) const { return ops_[static_cast<std::size_t>(k)]; }
  OpCounters total_communication() const;  // every kind but compute
  const std::vector<TraceEvent>& events() const { return events_; }
  // The communicators this rank's events happened on, by the index events carry: "world",
  // then each communicator split from it by its name ("ranks 0,2 of world"). Kept by reset().
  const std::vector<std::string>& communicators() const { return communicators_; }
  // The world ranks of each of communicators(), in its rank order (empty for the world).
  const std::vector<std::vector<int>>& communicator_members() const { return members_; }
  int communicator_id(const std::string& name, const std::vector<int>& members = {});

  // A dry run (dry_run.hpp): the rank records what it would do and moves, allocates and
  // multiplies nothing. Set by the recording communicator; strategies consult it where they
  // touch data outside the Communicator and the plan's helpers.
  bool dry() const { return dry_; }
  void set_dry(bool dry) { dry_ = dry; }

  // Parameter memory, as strategies allocate and free it (see ParameterHold).
  std::uint64_t persistent_param_bytes() const { return persistent_peak_; }
  std::uint64_t peak_param_bytes() const { return peak_; }

  // Seconds since the clock was started (always 0 in a dry run, which takes no time).
  double now() const {
    return dry_ ? 0.0 : std::chrono::duration<double>(Clock::now() - epoch_).count();
  }

  // Hands the trace (events()) over, keeping every counter; and gives it memory to reuse
  // (a dry run records rank after rank: fresh memory for each costs more than the recording).
  std::vector<TraceEvent> take_trace() { return std::move(events_); }
  void reuse_for_trace(std::vector<TraceEvent>&& memory) {
    events_ = std::move(memory);
    events_.clear();
  }
  void record(const TraceEvent& e, std::uint64_t messages_sent, std::uint64_t messages_received,
              double flops = 0, double ring_bytes = 0);
  void hold_params(std::uint64_t bytes, bool persistent);
  void release_params(std::uint64_t bytes, bool persistent);

 private:
  std::array<OpCounters, kOpKinds> ops_{};
  std::vector<TraceEvent> events_;
  std::vector<std::string> communicators_{"world"};
  std::vector<std::vector<int>> members_{{}};
  bool dry_ = false;
  Clock::time_point epoch_ = Clock::now();
  std::uint64_t held_ = 0, peak_ = 0, persistent_ = 0, persistent_peak_ = 0;
};

// Registers parameter bytes held by a strategy for as long as it lives. Persistent holds are
// the parameters a rank keeps between steps (DP: all of B; FSDP: its shard); temporary holds
// are gathered copies that live for one multiply.
class ParameterHold {
 public:
  ParameterHold(RankStats& stats, std::uint64_t bytes, bool persistent)
      : stats_(stats), bytes_(bytes), persistent_(persistent) {
    stats_.hold_params(bytes_, persistent_);
  }
  ~ParameterHold() { stats_.release_params(bytes_, persistent_); }
  ParameterHold(const ParameterHold&) = delete;
  ParameterHold& operator=(const ParameterHold&) = delete;

 private:
  RankStats& stats_;
  std::uint64_t bytes_;
  bool persistent_;
};

// Times f() as a local multiply of a rows x inner by an inner x cols matrix (a dry run's
// rank records it without running f). Touches no stats, so it may run on a helper thread;
// record the event after.
template <typename F>
TraceEvent timed_multiply(const RankStats& stats, std::size_t rows, std::size_t inner,
                          std::size_t cols, F&& f) {
  TraceEvent e;
  e.op = OpKind::compute;
  e.rows = rows;
  e.inner = inner;
  e.cols = cols;
  e.start_s = stats.now();
  if (!stats.dry()) f();
  e.duration_s = stats.now() - e.start_s;
  return e;
}

inline void record_multiply(RankStats& stats, const TraceEvent& e) {
  stats.record(e, 0, 0,
               2.0 * static_cast<double>(e.rows) * static_cast<double>(e.inner) *
                   static_cast<double>(e.cols));
}

}  // namespace distmm

// Collectives: every kind swept over sizes on a group, warm and on fresh buffers.
#include <algorithm>
#include <armadillo>
#include <cmath>
#include <span>
#include <string>
#include <thread>

#include "calibration/measure.hpp"
#include "distmm/memory.hpp"
#include "distmm/sharding.hpp"

namespace distmm::calibration {

constexpr int kRoot = 0;

// The tag of the ring shift that places an all-gather's blocks before its first call.
constexpr int kPlaceTag = 11;

// One call of a collective of kCollectiveOps (model.hpp) on a group (every member with its
// buffers for `count` elements in all; root 0).

struct CollectiveCall {
  std::string op;
  std::vector<std::size_t> counts;  // per member
  std::size_t count = 0;            // elements in all
  std::size_t mine = 0;             // elements of this member's block

  // `name` may end in kThenCompute: the call is the collective before it (the sweep has
  // the members multiply after it).
  CollectiveCall(std::string name, std::size_t elements, int members, int me)
      : op(std::move(name)) {
    if (op.ends_with(kThenCompute)) op.resize(op.size() - std::string_view(kThenCompute).size());
    counts = shard_counts(elements, members);
    count = elements;
    mine = counts[static_cast<std::size_t>(me)];
  }
  bool all_gather() const { return op == "allgatherv"; }
  // The whole buffer is needed by every member, or by the root only.
  bool whole_everywhere() const {
    return op == "broadcast" || all_gather() || op == "allreduce" || op == "reduce" ||
           op == "reduce_scatter";
  }
  void run(Communicator& g, std::span<double> whole, std::span<double> part) const {
    const bool root = g.rank() == 0;
    const std::span<const double> none;
    if (op == "broadcast") {
      g.broadcast(whole, 0);
    } else if (op == "scatterv") {
      if (root)
        g.scatterv(whole, counts, in_place, 0);
      else
        g.scatterv(none, counts, part, 0);
    } else if (op == "gatherv") {
      if (root)
        g.gatherv(in_place, whole, counts, 0);
      else
        g.gatherv(part, std::span<double>{}, counts, 0);
    } else if (op == "allgatherv") {
      g.allgatherv(part, whole, counts);
    } else if (op == "allreduce") {
      g.allreduce_sum(whole);
    } else if (op == "reduce") {
      g.reduce_sum(whole, 0);
    } else {
      g.reduce_scatter_sum(whole, part, counts);
    }
  }
};

constexpr double kPairCall_s = 0.25;

constexpr std::size_t kThenComputeFromBytes = 4096;

void multiply_for(double seconds) {
  static const arma::mat a(256, 256, arma::fill::randu), b(256, 256, arma::fill::randu);
  arma::mat c;
  const auto start = Clock::now();
  while (since(start) < seconds) c = a * b;
}

// A run calls a collective on buffers a multiply (or a whole execution) has pushed out of the
// caches since their last use; called back to back, a collective runs from the caches, 2-7
// times faster (measured, 2 ranks on one host, scatterv back to back and after 40 ms idle:
// 1 MiB 0.020 ms and 0.146, 16 MiB 0.72 and 2.0, 64 MiB 4.3 and 8.0; a memcpy alike). On one
// host warm calls are timed after this much idleness: held-out ablations chose it over the
// calls back to back and over a blend of the two by how long an execution takes. Across hosts
// (the links' time dominates, and calls already idle to drain them) it did not pay: back to
// back there (docs/time-model.md, step 4).
constexpr double kCacheIdle_s = 0.03;
constexpr int kIdleCalls = 3;  // per size

// A member's calls of one size: when each ended, in seconds from the call's common start;
// the first `hot` back to back (the first of them on fresh buffers), the rest each after
// kCacheIdle_s of idleness.
struct Timed {
  std::vector<double> ends;
  std::size_t hot = 0;
};

// Measures every collective on `group` (this rank's group: disjoint groups of the same size
// measure at once, `groups` of them) over a sweep of sizes, warm and on fresh buffers. Every
// rank of `world` calls it; a call's time is the slowest member's (over every group), from a
// common start (a barrier of the world, after `idle_s` of idleness). Sizes stop growing once
// a call takes more than an eighth of `max_call_s` (on one host both back to back and after
// idling; across hosts: not before 1 MiB while a call takes at most kPairCall_s) or at
// `max_bytes`.
namespace {

class CollectiveSweep {
 public:
  CollectiveSweep(Communicator& world, Communicator& group, int ranks_per_host, int groups,
                  std::size_t max_bytes, double max_call_s, double idle_s)
      : world_(world),
        group_(group),
        ranks_per_host_(ranks_per_host),
        groups_(groups),
        max_bytes_(max_bytes),
        max_call_s_(max_call_s),
        idle_s_(idle_s),
        me_(group.rank()),
        members_(group.size()) {}

  // The ops to sweep: `ops` (empty: every kind), and the forms only the world's runs have.
  std::vector<const char*> ops_for(std::vector<const char*> ops) const;
  CollectiveCurve sweep(const char* name);

 private:
  // `calls` calls of `call` on buffers fresh from the kernel: the first uses them for the
  // first time, the others are warm; then `idle_calls` after idling.
  Timed measure(const CollectiveCall& call, int calls, int idle_calls, double previous_s,
                bool then_compute);
  // Every member's end of each call, gathered at the root: the back-to-back time, the first
  // call's excess over it and the time after idling (0: none) (every rank gets them).
  std::vector<double> point_of(const Timed& timed);

  Communicator &world_, &group_;
  int ranks_per_host_, groups_;
  std::size_t max_bytes_;
  double max_call_s_, idle_s_;
  int me_, members_;
};

std::vector<const char*> CollectiveSweep::ops_for(std::vector<const char*> ops) const {
  if (ops.empty()) ops.assign(std::begin(kCollectiveOps), std::end(kCollectiveOps));
  // The world's broadcast and scatter whose members multiply next (tp-col's, dp's).
  if (&group_ == &world_)
    ops.insert(ops.end(), std::begin(kThenComputeOps), std::end(kThenComputeOps));
  return ops;
}

Timed CollectiveSweep::measure(const CollectiveCall& call, int calls, int idle_calls,
                               double previous_s, bool then_compute) {
  const bool needs_whole = call.whole_everywhere() || me_ == 0;
  const FreshPages whole(needs_whole ? call.count : 0);
  // allgatherv sends its own block from a buffer of its own; the others' parts are
  // received (or sent) by non-roots only.
  const FreshPages part(call.all_gather() || call.op == "reduce_scatter" || me_ != 0 ? call.mine
                                                                                     : 0);
  // An all-gather sends what a plan's setup placed, a shard the network wrote (over TCP a
  // block the CPU wrote costs more on its first send): each member's block arrives from the
  // one before it in a ring shift, all at once.
  if (call.all_gather() && members_ > 1) {
    const int next = (me_ + 1) % members_, previous = (me_ + members_ - 1) % members_;
    const FreshPages source(call.counts[static_cast<std::size_t>(next)]);
    group_.sendrecv(std::span<const double>(source.span()), next, kPlaceTag, part.span(), previous,
                    kPlaceTag);
  }
  // The library's own temporaries (a reduction's, a packed datatype's) come fresh from
  // the kernel in a new process: hand what the C library kept back to the kernel first.
  release_freed_memory();
  Timed timed;
  timed.hot = static_cast<std::size_t>(calls);
  for (int i = 0; i < calls + idle_calls; ++i) {
    // Idle first (twice the last call, within [1 ms, idle_s]), as a run's collectives follow
    // its multiplies: a link's queue drains and a token bucket refills; after the hot calls,
    // long enough for the buffers to leave the caches.
    const double drain =
        idle_s_ > 0
            ? std::clamp(2 * (timed.ends.empty() ? previous_s : timed.ends.back()), 1e-3, idle_s_)
            : 0.0;
    const double idle = i < calls ? drain : std::max(drain, kCacheIdle_s);
    if (idle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(idle));
    world_.barrier();
    const auto start = Clock::now();
    call.run(group_, whole.span(), part.span());
    timed.ends.push_back(since(start));
    // Multiplying while the root serves the others, longer than that takes (untimed).
    if (then_compute) multiply_for(std::min(0.01 + 1.5 * previous_s, 0.25));
  }
  return timed;
}

std::vector<double> CollectiveSweep::point_of(const Timed& timed) {
  const std::size_t calls = timed.ends.size(), hot = timed.hot;
  const std::vector<double>& mine = timed.ends;
  const std::size_t stride = mine.size();
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world_.size()));
  world_.gatherv(mine, all,
                 std::vector<std::size_t>(static_cast<std::size_t>(world_.size()), mine.size()),
                 kRoot);
  std::vector<double> point(3, 0.0);
  if (world_.rank() == kRoot) {
    // Each call from the common start to its last member's end.
    std::vector<double> slowest(calls, 0.0);
    for (std::size_t r = 0; r < static_cast<std::size_t>(world_.size()); ++r) {
      for (std::size_t i = 0; i < calls; ++i)
        slowest[i] = std::max(slowest[i], all[r * stride + i]);
    }
    const auto idle = slowest.begin() + static_cast<std::ptrdiff_t>(hot);
    point[0] = median_of(std::vector<double>(slowest.begin() + 1, idle));
    point[1] = std::max(0.0, slowest.front() - point[0]);
    if (idle != slowest.end()) point[2] = median_of(std::vector<double>(idle, slowest.end()));
  }
  world_.broadcast(point, kRoot);
  return point;
}

CollectiveCurve CollectiveSweep::sweep(const char* name) {
  // The world's all-reduce across hosts (dp's and tp-col's gradients) runs at a rate that
  // changes with size up to the large calls training makes: swept until they are large.
  const bool until_large =
      (idle_s_ > 0 && &group_ == &world_ && std::string_view(name) == "allreduce");
  CollectiveCurve curve;
  curve.op = name;
  curve.ranks = members_;
  curve.ranks_per_host = ranks_per_host_;
  curve.groups = groups_;
  // Members-multiply-next forms from 4 KiB (below, the root's eager messages are out before
  // anyone computes: the plain curve serves).
  const bool then_compute = std::string_view(name).ends_with(kThenCompute);
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = then_compute ? kThenComputeFromBytes : 8; bytes < max_bytes_;
       bytes *= 8) {
    sizes.push_back(bytes);
  }
  sizes.push_back(max_bytes_);
  double previous_s = 0, first_s = 0;
  for (std::size_t bytes : sizes) {
    const CollectiveCall call(name, bytes / sizeof(double), members_, me_);
    // The first call (fresh buffers), then enough warm ones for a steady median, within about
    // 30 ms (at least 3).
    const int reps = then_compute      ? 3
                     : previous_s <= 0 ? 10
                     : previous_s * 8 > max_call_s_
                         ? 2
                         : static_cast<int>(std::clamp(0.03 / (previous_s * 8), 3.0, 15.0));
    // On one host a warm call is one after idling; the first call's excess is over one back to
    // back (what held out). The members-multiply-next forms serve as an excess over the plain
    // call back to back: no idle calls.
    const bool idling = idle_s_ <= 0 && !then_compute;
    const std::vector<double> point =
        point_of(measure(call, reps + 1, idling ? kIdleCalls : 0, previous_s, then_compute));
    curve.points.push_back(
        {call.count * sizeof(double), std::max(idling ? point[2] : point[0], 1e-9), point[1]});
    // The next size takes about 8 times as long: stop before it passes max_call_s.
    previous_s = point[0];
    const bool large = point[0] >= 0.05 && bytes / static_cast<std::size_t>(members_) >= (4u << 20);
    // Across hosts the model extrapolates from the two largest calls once the larger is 1 MiB
    // (CollectiveCurve::time): reach it where that call takes at most kPairCall_s.
    const bool short_of_pair = idle_s_ > 0 && bytes < (1u << 20) && point[0] * 8 <= kPairCall_s;
    if (first_s == 0) first_s = point[0];
    if (then_compute) {
      // Mostly hand-offs, alike at every size: the growth beyond the first says what's next.
      if ((point[0] - first_s) * 8 + first_s > kPairCall_s) break;
      continue;
    }
    // Where calls are also timed after idling, the smaller of the two figures: under load each
    // call back to back can wait out a time slice while its partner busy-polls (an all-reduce of
    // 2 MiB took over 12.5 ms back to back and 1 ms after idling, two tests beside it on 2
    // cores), and a sweep stopped by that would end with a call far shorter than its rule says.
    const double call_s = idling ? std::min(point[0], point[2]) : point[0];
    if (call_s * 8 > max_call_s_ && !(until_large && !large) && !short_of_pair) break;
  }
  return curve;
}

}  // namespace

std::vector<CollectiveCurve> collective_sweep(Communicator& world, Communicator& group,
                                              int ranks_per_host, int groups, std::size_t max_bytes,
                                              double max_call_s, double idle_s,
                                              std::vector<const char*> ops) {
  CollectiveSweep sweep(world, group, ranks_per_host, groups, max_bytes, max_call_s, idle_s);
  std::vector<CollectiveCurve> curves;
  for (const char* name : sweep.ops_for(std::move(ops))) curves.push_back(sweep.sweep(name));
  return curves;
}

}  // namespace distmm::calibration

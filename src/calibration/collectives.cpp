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

// One call of each collective of kCollectiveOps (model.hpp) on a group (every member with its
// buffers for `count` elements in all; root 0): CollectiveCall below.
// The tag of the ring shift that places an all-gather's blocks before its first call.
constexpr int kPlaceTag = 11;

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
  // Every member sends and receives at once (the others: one way, to or from a root).
  bool exchanges() const { return all_gather() || op == "allreduce" || op == "reduce_scatter"; }
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

// Open MPI's TCP transport sends messages up to this size eagerly (btl_tcp_eager_limit).
constexpr std::size_t kEagerBytes = 64u << 10;

constexpr std::size_t kThenComputeFromBytes = 4096;

// Multiplies (small, cache-resident: the core's rate) until `seconds` have passed.
void multiply_for(double seconds) {
  static const arma::mat a(256, 256, arma::fill::randu), b(256, 256, arma::fill::randu);
  arma::mat c;
  const auto start = Clock::now();
  while (since(start) < seconds) c = a * b;
}

// A call on more bytes takes no less time than one on fewer: a smaller size's median above a
// larger one's is the scheduler's, not the bytes' (under load, 2 rank threads with other
// processes on 2 cores: an 8 B gather's median 4.0 ms, the 16 MiB one's 4.0 ms), and it
// takes the larger's. `points` grow in bytes.
void no_faster_when_larger(std::vector<CollectivePoint>& points) {
  for (std::size_t i = points.size(); i-- > 1;) {
    points[i - 1].s = std::min(points[i - 1].s, points[i].s);
  }
}

// Across hosts, a first call's excess over a warm one is capped at what first touching its
// buffers' pages can cost: three times its bytes (each member's whole buffer, its part and the
// library's temporary) at the per-page figure calibrate measured. Beyond it the excess is not
// the buffers', and runs did not show it: at 200 Mbit/s, 1 rank per host, a 16 MiB all-reduce
// of 0.71 s read 0.49 s of first use in one calibration and 0.35 s in another (a second first
// call, on other fresh buffers, as slow), 0 in others; tp-col training 8192 x 512 x 512,
// whose first step all-reduces 32 MiB of fresh buffers, took 1.647 s in that step and 1.641
// in the later ones, where the 0.49 s had predicted the first 1.03 s longer.
void cap_first_use_across_hosts(std::vector<CollectiveCurve>& curves, double s_per_page) {
  for (CollectiveCurve& curve : curves) {
    if (curve.one_host()) continue;
    for (CollectivePoint& point : curve.points) {
      point.first_use_s =
          std::min(point.first_use_s, 3.0 * static_cast<double>(point.bytes) / 4096.0 * s_per_page);
    }
  }
}

// A member's calls of one size: when each ended, in seconds from the call's common start.
struct Timed {
  std::vector<double> ends;
};

// Measures every collective on `group` (this rank's group: disjoint groups of the same size
// measure at once, `groups` of them) over a sweep of sizes, warm and on fresh buffers. Every
// rank of `world` calls it; a call's time is the slowest member's (over every group), from a
// common start (a barrier of the world, after `idle_s` of idleness). Sizes stop growing once
// a warm call takes `max_call_s` (across hosts: not before 1 MiB while a call takes at most
// kPairCall_s) or at `max_bytes`.
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
  // first time, the others are warm.
  Timed measure(const CollectiveCall& call, int calls, double previous_s, bool then_compute);
  // Every member's end of each call, gathered at the root: the warm time and the first use
  // (every rank gets them).
  std::vector<double> point_of(const Timed& timed, bool second_first, bool rendezvous);

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

Timed CollectiveSweep::measure(const CollectiveCall& call, int calls, double previous_s,
                               bool then_compute) {
  const bool needs_whole = call.whole_everywhere() || me_ == 0;
  const FreshPages whole(needs_whole ? call.count : 0);
  // allgatherv sends its own block from a buffer of its own; the others' parts are
  // received (or sent) by non-roots only.
  const FreshPages part(call.all_gather() || call.op == "reduce_scatter" || me_ != 0 ? call.mine
                                                                                     : 0);
  // An all-gather sends what a plan's setup placed, its shard of B, which the network
  // wrote then (fsdp's and hsdp's setup scatter it). Over TCP a block sent from such pages
  // costs nothing more on its first send; one the CPU wrote, as much as a page received.
  // A plain MPI program, 2 hosts of 2 ranks at 1 Gbit/s, each host's pair all-gathering
  // 32 MiB at once: the first call took 0.109-0.121 s longer than a warm one from fresh
  // blocks, 0.075-0.085 from blocks scattered to them, 0.091-0.139 from blocks a rank
  // sent itself; on one host (shared memory) 0.02-0.12 s either way. hsdp
  // 32 x 2048 x 2048's cold all-gather took 0.065-0.080 s longer than its warm ones, and
  // from fresh blocks calibrate had predicted its execution +23 to +43 %. Each member's
  // block comes from the one before it in a ring shift, all at once (a scatter from member
  // 0 sends all but one block over the root's link in turn: seconds more across hosts).
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
  for (int i = 0; i < calls; ++i) {
    // Idle first, as a run's collectives follow its multiplies: a network link's queue
    // drains and a token bucket refills (a shaped link lets a burst through faster).
    // Twice the last call's time, within [1 ms, idle_s].
    if (idle_s_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(
          std::clamp(2 * (timed.ends.empty() ? previous_s : timed.ends.back()), 1e-3, idle_s_)));
    }
    world_.barrier();
    const auto start = Clock::now();
    call.run(group_, whole.span(), part.span());
    timed.ends.push_back(since(start));
    // Multiplying while the root serves the others, longer than that takes (untimed).
    if (then_compute) multiply_for(std::min(0.01 + 1.5 * previous_s, 0.25));
  }
  return timed;
}

std::vector<double> CollectiveSweep::point_of(const Timed& timed, bool second_first,
                                              bool rendezvous) {
  const std::size_t calls = timed.ends.size();
  const std::vector<double>& mine = timed.ends;
  const std::size_t stride = mine.size();
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world_.size()));
  world_.gatherv(mine, all,
                 std::vector<std::size_t>(static_cast<std::size_t>(world_.size()), mine.size()),
                 kRoot);
  std::vector<double> point(2, 0.0);  // warm, first use
  if (world_.rank() == kRoot) {
    // Each call from the common start to its last member's end.
    std::vector<double> slowest(calls, 0.0);
    for (std::size_t r = 0; r < static_cast<std::size_t>(world_.size()); ++r) {
      for (std::size_t i = 0; i < calls; ++i)
        slowest[i] = std::max(slowest[i], all[r * stride + i]);
    }
    const auto warm_end = slowest.end() - (second_first ? 1 : 0);
    const std::vector<double> warm(slowest.begin() + 1, warm_end);
    point[0] = rendezvous ? expected_of(warm) : median_of(warm);
    const double first = second_first ? std::min(slowest.front(), slowest.back()) : slowest.front();
    point[1] = std::max(0.0, first - point[0]);
  }
  world_.broadcast(point, kRoot);
  return point;
}

CollectiveCurve CollectiveSweep::sweep(const char* name) {
  // The world's all-reduce across hosts (dp's gradients, tp-col's input gradient), whose
  // sends cross both ways at once: measured at 200 Mbit/s, 1 rank per host, 2 MiB at half
  // the links' rate, 16 MiB at 0.65-0.9 of it, 32 MiB (tp-col training's m x k) at 0.6-0.9;
  // a step of tp-col training 8192 x 512 x 512, 1.6 s measured, was predicted 2.96 s carried
  // from 2 MiB, 2.23 s from 16 MiB (3.6 s more of calibration with 2 ranks per host).
  const bool until_large =
      (idle_s_ > 0 && &group_ == &world_ && std::string_view(name) == "allreduce");
  CollectiveCurve curve;
  curve.op = name;
  curve.ranks = members_;
  curve.ranks_per_host = ranks_per_host_;
  curve.groups = groups_;
  // The ones whose members multiply next from 4 KiB (below it the model keeps the plain
  // collective's curve: there the root's few eager messages are out before anyone computes).
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
    // Enough warm calls for a steady median, within about 30 ms (at least 3). Across hosts a
    // message beyond Open MPI's eager limit (its TCP transport's: 64 KiB) is sent once the
    // receiver answers; where every member sends at once the answer may queue behind the
    // answering member's own data, and the two ways run one after the other: at random, a quarter
    // to a half of calls (1 MiB each way at 200 Mbit/s: 43.5 or 85.4 ms; dp training's 2 MiB
    // all-reduce 89-92 ms or 132-148, tp-col's 16 MiB 0.716 or 1.02-1.06 s; one calibration read
    // that all-reduce at 1.06 s, another 1.40, the runs' median 0.72). In a plain MPI program the
    // first two such calls of a connection ran at the full rate every time, later ones at random
    // (neither the idle before a call, 0.01 to 0.4 s, nor the link's queue, 10 to 100 ms, changed
    // that), and once a call ran one way after the other the next ones mostly did too (series of
    // 10 all-gathers of 1 MiB a rank: 0, 7, 7 and 9 slow): calibrate's calls come late, a short
    // run's early. Two sockets per pair of ranks (btl_tcp_links=2) removed it, but hung
    // Open MPI 4.1.4 in the gather of columns (README, "Running on several machines"). Such a
    // curve keeps the calls' expected time (expected_of), from up to 5 calls within about 0.6 s
    // (a calibration across 2 hosts of 2 ranks at 200 Mbit/s takes 80 s of its 90 as it is: with
    // up to 7 calls within a second it took 90.9). Calls one way (to or from a root) have no such
    // race: they keep the median, which leaves out a rare stall of the link.
    const bool rendezvous = !curve.one_host() && call.exchanges() &&
                            bytes / static_cast<std::size_t>(members_) > kEagerBytes;
    const int reps =
        then_compute      ? 3
        : previous_s <= 0 ? 10
        : rendezvous      ? static_cast<int>(std::clamp(0.6 / (previous_s * 8),
                                                   previous_s * 8 > max_call_s_ ? 2.0 : 3.0, 5.0))
        : previous_s * 8 > max_call_s_
            ? 2
            : static_cast<int>(std::clamp(0.03 / (previous_s * 8), 3.0, 15.0));
    // The first call (fresh buffers), then warm ones; within one host, where a call is short,
    // a second first call on other fresh buffers (the less of the two first calls counts: a
    // single one is at the scheduler's mercy with more ranks than cores: one --ranks 4
    // calibration read 175 ms of first use on a 64 MiB broadcast, 1 ms at 16 MiB, and
    // fsdp's cold runs showed none of it). Each host's group in a calibration across hosts
    // too: 2 hosts of 2 ranks at 200 Mbit/s, one calibration's host groups read 30 ms of first
    // use on a 256 KiB reduce-scatter of 0.5 ms and 73 ms on a 16 MiB all-gather of 22 ms,
    // and predicted hsdp 32 x 2048 x 2048's cold execution 0.225 s against 0.066 measured.
    Timed timed = measure(call, reps + 1, previous_s, then_compute);
    // Where the world is on one host, longer calls too (its calibration takes 30-60 s of
    // the 90).
    const bool second_first =
        curve.one_host() && (previous_s * 8 < 0.05 || ranks_per_host_ >= world_.size());
    if (second_first) {
      const Timed again = measure(call, 1, previous_s, then_compute);
      timed.ends.push_back(again.ends.front());
    }
    const std::vector<double> point = point_of(timed, second_first, rendezvous);
    curve.points.push_back({call.count * sizeof(double), std::max(point[0], 1e-9), point[1]});
    // The next size takes about 8 times as long: stop before it passes max_call_s.
    previous_s = point[0];
    const bool large = point[0] >= 0.05 && bytes / static_cast<std::size_t>(members_) >= (4u << 20);
    // Across hosts the model reads how a collective's bytes go from its two largest calls
    // once the larger is 1 MiB (model.cpp, CollectiveCurve::time): reach it where that call
    // takes at most kPairCall_s. Measured at 200 Mbit/s, 2 hosts of 2 ranks: the
    // all-reduce stopped at 256 KiB (15 ms); Open MPI's Rabenseifner, whose two ranks of a
    // host cross at once, then ran 32 MiB in 2.6 s against the links' 1.4.
    const bool short_of_pair = idle_s_ > 0 && bytes < (1u << 20) && point[0] * 8 <= kPairCall_s;
    if (first_s == 0) first_s = point[0];
    if (then_compute) {
      // Most of such a call is its hand-offs (a scheduler's time slice each), the same at
      // every size: the growth beyond the first size says how long the next one takes.
      if ((point[0] - first_s) * 8 + first_s > kPairCall_s) break;
      continue;
    }
    if (point[0] * 8 > max_call_s_ && !(until_large && !large) && !short_of_pair) break;
  }
  no_faster_when_larger(curve.points);
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

// Each curve of `kept` that `again` measured once more keeps, at each size, the faster of
// the two calls; sizes only one of them reached are kept as they are.
void merge_faster(std::vector<CollectiveCurve>& kept, const std::vector<CollectiveCurve>& again) {
  for (const CollectiveCurve& b : again) {
    auto a = std::find_if(kept.begin(), kept.end(), [&](const CollectiveCurve& c) {
      return c.op == b.op && c.ranks == b.ranks && c.ranks_per_host == b.ranks_per_host &&
             c.groups == b.groups;
    });
    if (a == kept.end()) continue;
    std::vector<CollectivePoint> points = a->points;
    for (const CollectivePoint& q : b.points) {
      auto same = std::find_if(points.begin(), points.end(),
                               [&](const CollectivePoint& p) { return p.bytes == q.bytes; });
      if (same == points.end()) {
        points.push_back(q);
      } else if (q.s < same->s) {
        *same = q;
      }
    }
    std::sort(points.begin(), points.end(),
              [](const CollectivePoint& x, const CollectivePoint& y) { return x.bytes < y.bytes; });
    no_faster_when_larger(points);
    a->points = std::move(points);
  }
}

}  // namespace distmm::calibration

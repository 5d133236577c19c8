// The replay of a dry run's events on a machine model (predict_time, model.hpp): each rank's
// clock advances step by step as model::Steps lines the ranks' events up; a multiply costs
// the gemm curve, a ring step its two messages on the link, a collective its calibrated
// curve (or the links' cost by Open MPI's algorithm) from when its last member arrives.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/model.hpp"
#include "model/costs.hpp"
#include "model/steps.hpp"

namespace distmm {
namespace {

using model::Costs;

class Replay {
 public:
  Replay(const MachineModel& model, const ModelPlacement& pl, const DryRun& run, bool train,
         const FreshMemory& fresh);
  PredictedRun predict();

 private:
  // How long rank r's multiply right after the step just read takes (0: its next event is no
  // multiply), and whether it is a ring step's (a sendrecv next, its multiply on the helper
  // thread beside it).
  struct NextMultiply {
    double s = 0;
    bool ring = false;
  };

  void describe_groups();
  double share(int ranks) const;
  double multiply_s(const PlannedEvent& e);
  double compute_s(int rank, const PlannedEvent& e);
  double fresh_part(const PlannedEvent& e) const;
  double first_use(const PlannedEvent& e, const LinkModel& link) const;
  NextMultiply next_multiply(int r);
  void start_execution();
  void multiplies();
  void ring_step();
  void collective();
  void group_starts();
  void look_up_curves(const PlannedEvent& e, std::size_t g, int concurrent);
  double cold_extra(const PlannedEvent& e, std::size_t g);
  double collective_cost(const PlannedEvent& e, std::size_t g, int across_at_once);
  double from_links(const PlannedEvent& e, std::size_t g, double total, double sharing) const;
  double curve_time(const PlannedEvent& e, std::size_t g, const CollectiveCurve& curve,
                    double sharing) const;
  double then_compute_excess(const PlannedEvent& e, std::size_t g, double sharing) const;

  const MachineModel& model_;
  const ModelPlacement& pl_;
  const DryRun& run_;
  bool train_;
  FreshMemory fresh_;
  int p_, hosts_, on_host_;
  const GemmModel& gemm_;
  model::Steps steps_;
  bool open_mpi_;
  Costs intra_, inter_;
  double oversubscribed_, late_share_lost_;
  bool cold_ = false;

  // Per group: does it span hosts, how many of its ranks share the busiest host, its curves.
  std::vector<bool> spans_;
  std::vector<int> per_host_;
  std::vector<const CollectiveCurve*> curve_, then_, plain_;
  std::vector<double> next_multiply_s_, start_, extra_, cost_;
  std::vector<char> ring_, seen_;

  std::vector<char> multiplied_;  // per rank: its first multiply done
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, double> rates_;
  std::vector<double> clock_, entered_, comm_, work_, contention_;
  std::vector<const PlannedEvent*> events_;  // per rank, its event of the step (or none)
  std::vector<double> durations_;            // of each execution (or step), on rank 0's clock
  double setup_end_ = 0, start0_ = 0;
  std::size_t executions_ = 0;
};

Replay::Replay(const MachineModel& model, const ModelPlacement& pl, const DryRun& run, bool train,
               const FreshMemory& fresh)
    : model_(model),
      pl_(pl),
      run_(run),
      train_(train),
      fresh_(fresh),
      p_(pl.ranks),
      hosts_((pl.ranks + pl.ranks_per_host - 1) / pl.ranks_per_host),
      on_host_(std::min(pl.ranks, pl.ranks_per_host)),
      gemm_(model.gemm_for(pl.blas_threads)),
      steps_(run),
      open_mpi_(model.backend == "mpi"),
      intra_{model.intra, model.reduce_Bps, open_mpi_},
      inter_{hosts_ > 1 ? model.inter : model.intra, model.reduce_Bps, open_mpi_,
             hosts_ > 1 ? &model.intra : nullptr} {
  if (hosts_ > 1 && model.inter.pieces.empty()) {
    throw InputError(model_label(model) + ": the ranks span " + std::to_string(hosts_) +
                         " hosts but the model has no links.inter (calibrate across hosts, or "
                         "write one)",
                     -1, "--model");
  }
  // The curve was measured with gemm.concurrent ranks multiplying at once on a host: scale
  // by how much more (or less) the run's ranks share the cores than that.
  oversubscribed_ = share(on_host_) / share(gemm_.concurrent);
  // Of a member served `late` seconds after the rest, what the host's multiplies that follow
  // lose: with no more ranks than cores all of it; with more, the ranks share the cores
  // throughout (a waiting rank polls, yielding) and the late one ends `late` times cores over
  // ranks after them.
  late_share_lost_ = 1.0 / share(on_host_);
  const auto ranks = static_cast<std::size_t>(p_);
  // The process's first multiply on each rank sets up the BLAS library's buffers (the first
  // strategy a process runs pays it).
  multiplied_.assign(ranks, fresh.caller ? 0 : 1);
  clock_.assign(ranks, 0.0);
  entered_ = comm_ = work_ = contention_ = clock_;
  events_.resize(ranks);
  describe_groups();
}

void Replay::describe_groups() {
  const auto& groups = run_.groups;
  const std::size_t n = groups.size();
  spans_.assign(n, false);
  per_host_.assign(n, 0);
  for (std::size_t g = 0; g < n; ++g) {
    const auto& members = groups[g];
    for (int r : members) spans_[g] = spans_[g] || pl_.host_of(r) != pl_.host_of(members.front());
    // Members are consecutive runs of ranks per host: count the largest run on one host.
    for (int r : members) {
      const int mine = static_cast<int>(std::count_if(
          members.begin(), members.end(), [&](int o) { return pl_.host_of(o) == pl_.host_of(r); }));
      per_host_[g] = std::max(per_host_[g], mine);
      if (members.size() > 64) break;  // large groups: the first member's host is typical
    }
  }
  curve_.assign(n, nullptr);
  then_ = plain_ = curve_;
  next_multiply_s_.assign(n, 0.0);
  start_ = extra_ = cost_ = next_multiply_s_;
  ring_.assign(n, 0);
  seen_.assign(n, 0);
}

// More ranks (times their BLAS threads) on a host than cores: each multiply gets a share.
double Replay::share(int ranks) const {
  return std::max(1.0, static_cast<double>(ranks * pl_.blas_threads) / model_.cores_per_host);
}

// A multiply's time at the curve's rate, as the run's ranks share the cores. The rate by
// shape is kept: a run's ranks multiply a few shapes many times, and each rate is several
// interpolations in log space.
double Replay::multiply_s(const PlannedEvent& e) {
  const double flops = 2.0 * static_cast<double>(e.rows) * static_cast<double>(e.inner) *
                       static_cast<double>(e.cols);
  if (flops == 0) return 0.0;
  auto [at, added] = rates_.try_emplace({e.rows, e.inner, e.cols}, 0.0);
  if (added) {
    at->second = gemm_.rate(static_cast<double>(e.rows), static_cast<double>(e.inner),
                            static_cast<double>(e.cols));
  }
  return flops / (at->second * 1e9) * oversubscribed_;
}

double Replay::compute_s(int rank, const PlannedEvent& e) {
  if (e.rows * e.inner * e.cols == 0) return 0.0;
  double setup_blas = 0;
  if (!multiplied_[static_cast<std::size_t>(rank)]) {
    multiplied_[static_cast<std::size_t>(rank)] = 1;
    const double rows = static_cast<double>(e.rows), inner = static_cast<double>(e.inner),
                 cols = static_cast<double>(e.cols);
    // The first touch of the packing buffers' pages (OpenBLAS packs in doubles), as many ranks
    // at once as share the host's cores: a run's rank threads, multiplying at once, each touch
    // a buffer of their own.
    setup_blas = model::blas_packed_elements(rows, inner, cols, gemm_.threads) * 8.0 / 4096.0 *
                 model_.first_touch_s_per_page * share(on_host_);
  }
  return multiply_s(e) + setup_blas;
}

// The cold execution's buffers are new to the process, but for the caller's A and C where a
// plan before has used them.
double Replay::fresh_part(const PlannedEvent& e) const {
  return e.caller_buffers && !fresh_.caller ? 0.0 : 1.0;
}

// The first use of a cold execution's buffers by the link (every byte of it counts).
double Replay::first_use(const PlannedEvent& e, const LinkModel& link) const {
  // The MPI backend moves a columns call's pieces through its own staging slots, reused by
  // every call: no single-copy transfer from or into fresh pages, whose first use the link's
  // figure is.
  if (!cold_ || (e.strided && open_mpi_)) return 0.0;
  // A ring shift's two messages move at once (each rank copies its incoming one).
  const std::uint64_t bytes = e.op == OpKind::sendrecv ? std::max(e.bytes_sent, e.bytes_received)
                                                       : e.bytes_sent + e.bytes_received;
  return static_cast<double>(bytes) / 4096.0 * link.first_use_s_per_page * fresh_part(e);
}

Replay::NextMultiply Replay::next_multiply(int r) {
  const PlannedEvent* next = steps_.upcoming(r);
  if (next == nullptr) return {};
  if (next->op == OpKind::compute) return {multiply_s(*next), false};
  if (next->op != OpKind::sendrecv) return {};
  const PlannedEvent* after = steps_.upcoming(r, 1);
  if (after == nullptr || after->op != OpKind::compute || !after->overlapped) return {};
  return {multiply_s(*after), true};
}

void Replay::start_execution() {
  cold_ = executions_ == 0;
  if (cold_) {
    setup_end_ = *std::max_element(clock_.begin(), clock_.end());
  } else {
    durations_.push_back(clock_[0] - start0_);
  }
  ++executions_;
  if (!train_ || cold_) {
    // The program's barrier before each execution (training: before the first step) lines
    // the ranks up.
    const double at = *std::max_element(clock_.begin(), clock_.end());
    std::fill(clock_.begin(), clock_.end(), at);
  }
  start0_ = clock_[0];
  std::fill(comm_.begin(), comm_.end(), 0.0);
  std::fill(work_.begin(), work_.end(), 0.0);
}

void Replay::multiplies() {
  for (int r = 0; r < p_; ++r) {
    const auto& e = events_[static_cast<std::size_t>(r)];
    if (!e) continue;
    const auto me = static_cast<std::size_t>(r);
    const double t = compute_s(r, *e);
    work_[me] += t;
    // A multiply on the helper thread started when the rank entered its sendrecv: the longer
    // of the two, plus the link's contention times the shorter.
    if (e->overlapped) {
      const double start = entered_[me], exchange = clock_[me] - start;
      clock_[me] = start + std::max(exchange, t) + contention_[me] * std::min(exchange, t);
    } else {
      clock_[me] += t;
    }
  }
}

void Replay::ring_step() {
  const std::vector<double> before = clock_;
  // Every rank of a host copies its incoming message at once, the first use of the buffers
  // included (CPU work): with more ranks than cores each gets its share.
  const double copying = std::max(1.0, static_cast<double>(on_host_) / model_.cores_per_host);
  for (int r = 0; r < p_; ++r) {
    const auto& e = events_[static_cast<std::size_t>(r)];
    if (!e) continue;
    const auto me = static_cast<std::size_t>(r);
    const Costs& c =
        pl_.host_of(e->peer_to) != pl_.host_of(r) || pl_.host_of(e->peer_from) != pl_.host_of(r)
            ? inter_
            : intra_;
    // Every rank shifts at once: the link's time for each message, as calibrated for such an
    // exchange.
    const double slowdown = c.link.exchange_slowdown;
    const double out_done = std::max(before[me], before[static_cast<std::size_t>(e->peer_to)]) +
                            slowdown * c.t(static_cast<double>(e->bytes_sent)) +
                            first_use(*e, c.link) * copying;
    const double in_done = std::max(before[me], before[static_cast<std::size_t>(e->peer_from)]) +
                           slowdown * c.t(static_cast<double>(e->bytes_received));
    entered_[me] = before[me];
    contention_[me] = c.link.overlap_contention;
    clock_[me] = std::max(out_done, in_done);
    comm_[me] += clock_[me] - before[me];
  }
}

// Each group's start (when its last member arrives) and the longest multiply a member does
// next.
void Replay::group_starts() {
  for (int r = 0; r < p_; ++r) {
    const auto& e = events_[static_cast<std::size_t>(r)];
    if (!e) continue;
    const auto g = static_cast<std::size_t>(e->group);
    const double at = clock_[static_cast<std::size_t>(r)];
    start_[g] = seen_[g] ? std::max(start_[g], at) : at;
    const NextMultiply next = next_multiply(r);
    next_multiply_s_[g] = seen_[g] ? std::max(next_multiply_s_[g], next.s) : next.s;
    ring_[g] = static_cast<char>((seen_[g] && ring_[g] != 0) || next.ring);
    seen_[g] = 1;
  }
}

// The curves a collective of group g is costed by: what calibration measured for the same op,
// group size and spread, as many groups at once (none: costed from the links).
void Replay::look_up_curves(const PlannedEvent& e, std::size_t g, int concurrent) {
  const int size = static_cast<int>(run_.groups[g].size());
  curve_[g] = plain_[g] = then_[g] = nullptr;
  if (size < 2) return;
  const int ph = per_host_[g];
  // The columns forms have none: the links and the strided copy rate cost them.
  if (!e.strided) {
    curve_[g] = model_.collective(std::string(name_of(e.op)), size, ph, concurrent);
  }
  // A broadcast or scatter whose members multiply next (with more ranks than cores the
  // members served first take the cores from the rest): the excess of the contiguous call's
  // then-compute curve over its plain one.
  if ((e.op == OpKind::scatterv || e.op == OpKind::broadcast) && next_multiply_s_[g] > 0) {
    then_[g] = model_.collective(std::string(name_of(e.op)) + kThenCompute, size, ph, concurrent);
    // Below its first size the plain collective's curve serves.
    if (then_[g] != nullptr &&
        (then_[g]->points.empty() || e.total_bytes < then_[g]->points.front().bytes)) {
      then_[g] = nullptr;
    }
    plain_[g] = then_[g] == nullptr
                    ? nullptr
                    : model_.collective(std::string(name_of(e.op)), size, ph, concurrent);
  }
}

// A cold collective waits for its slowest member's first use of its buffers.
double Replay::cold_extra(const PlannedEvent& e, std::size_t g) {
  const LinkModel& link = (spans_[g] ? inter_ : intra_).link;
  if (!cold_) return 0;
  if (curve_[g] == nullptr) return first_use(e, link);
  const CollectivePoint& last = curve_[g]->points.back();
  if (e.total_bytes <= last.bytes || last.bytes >= model::kReliableFirstUseBytes) {
    return curve_[g]->first_use(e.total_bytes) * fresh_part(e);
  }
  // A sweep cut short on a slow link: its small calls' first-use figures are noise, no
  // per-byte rate to carry on; the links' per page beyond it.
  const double beyond =
      static_cast<double>(e.total_bytes - last.bytes) / static_cast<double>(e.total_bytes);
  return last.first_use_s * fresh_part(e) + first_use(e, link) * beyond;
}

// A collective's cost from the links, by the algorithm Open MPI picks, with a columns call's
// strided copies; `sharing`: the groups with one rank per host at work across hosts at once,
// each link shared among them.
double Replay::from_links(const PlannedEvent& e, std::size_t g, double total,
                          double sharing) const {
  const auto& members = run_.groups[g];
  const int size = static_cast<int>(members.size());
  const Costs& c = spans_[g] ? inter_ : intra_;
  double cost = c.collective(e.op, size, total * sharing, per_host_[g]);
  if ((e.op == OpKind::scatterv || e.op == OpKind::gatherv) && size > 1) {
    // Linear at the root: one message to (or from) each other member, over its link.
    const int root = members[static_cast<std::size_t>(e.root)];
    const double per = total / size;
    cost = 0;
    for (int member : members) {
      if (member == root) continue;
      cost += pl_.host_of(member) == pl_.host_of(root) ? intra_.t(per) : inter_.t(per * sharing);
    }
  }
  if (e.strided_bytes > 0) {  // a columns call, at its root
    // MPI: the root packs (or unpacks) every member's columns (its own unless in place), one
    // block after another. The simulator: each member copies its own, as many at once as the
    // host has cores. Either way by tiles, at the rate of a block's size.
    const auto bytes = static_cast<double>(e.strided_bytes);
    const double blocks = std::max<double>(1, static_cast<double>(e.strided_blocks));
    if (const double rate = model_.strided_rate(bytes / blocks); rate > 0) {
      cost +=
          bytes / rate / (open_mpi_ ? 1.0 : std::clamp<double>(blocks, 1, model_.cores_per_host));
    }
  }
  return cost;
}

double Replay::curve_time(const PlannedEvent& e, std::size_t g, const CollectiveCurve& curve,
                          double sharing) const {
  if (model_.intra.pieces.empty()) return curve.time(e.total_bytes, {});
  return curve.time(e.total_bytes, [&](double bytes) { return from_links(e, g, bytes, sharing); });
}

// Calibrate's members multiply after their part for longer than the call takes, and take the
// cores from the rest throughout; a run's members hinder the rest only while their own next
// multiply lasts: the excess over the plain call in proportion. Ring steps wait on each
// neighbour (no one gets ahead while a member is late), and so does what follows the MPI
// backend's scatter of columns (the root packs each member's columns in turn and starts last).
double Replay::then_compute_excess(const PlannedEvent& e, std::size_t g, double sharing) const {
  if (then_[g] == nullptr || plain_[g] == nullptr) return 0;
  const double then = curve_time(e, g, *then_[g], sharing);
  const double plain = curve_time(e, g, *plain_[g], sharing);
  if (plain >= then) return 0;
  const double late = (then - plain) * std::min(1.0, next_multiply_s_[g] / then);
  return late * (ring_[g] || (open_mpi_ && e.strided) ? 1.0 : late_share_lost_);
}

// A collective costs every member of its group the same: costed at its first member.
double Replay::collective_cost(const PlannedEvent& e, std::size_t g, int across_at_once) {
  // A group with one rank per host spanning hosts shares each link with the other such
  // groups at work: its bytes as many times over.
  const double sharing = spans_[g] && per_host_[g] == 1 ? std::max(1, across_at_once) : 1;
  const double cost = curve_[g] == nullptr
                          ? from_links(e, g, static_cast<double>(e.total_bytes), sharing)
                          : curve_time(e, g, *curve_[g], sharing);
  return cost + then_compute_excess(e, g, sharing);
}

// A collective: each group starts when its last member arrives and ends together.
void Replay::collective() {
  std::fill(extra_.begin(), extra_.end(), 0.0);
  group_starts();
  const int concurrent = static_cast<int>(std::count(seen_.begin(), seen_.end(), 1));
  // Groups with one rank per host spanning hosts at once (hsdp's replica groups): a host's
  // ranks, one in each, send over its link together.
  int across_at_once = 0;
  for (std::size_t g = 0; g < run_.groups.size(); ++g) {
    across_at_once += seen_[g] == 1 && spans_[g] && per_host_[g] == 1;
  }
  for (int r = 0; r < p_; ++r) {
    const auto& e = events_[static_cast<std::size_t>(r)];
    if (!e || seen_[static_cast<std::size_t>(e->group)] != 1) continue;
    seen_[static_cast<std::size_t>(e->group)] = 2;  // looked up
    look_up_curves(*e, static_cast<std::size_t>(e->group), concurrent);
  }
  for (int r = 0; r < p_; ++r) {
    const auto& e = events_[static_cast<std::size_t>(r)];
    if (!e) continue;
    const auto g = static_cast<std::size_t>(e->group);
    extra_[g] = std::max(extra_[g], cold_extra(*e, g));
  }
  for (int r = 0; r < p_; ++r) {
    const auto& e = events_[static_cast<std::size_t>(r)];
    if (!e) continue;
    const auto g = static_cast<std::size_t>(e->group);
    if (seen_[g] != 3) {
      seen_[g] = 3;
      // At the root's event where the call has one: its side says what is packed.
      const PlannedEvent* at = e;
      if (e->root >= 0) {
        const int root = run_.groups[g][static_cast<std::size_t>(e->root)];
        if (const PlannedEvent* own = events_[static_cast<std::size_t>(root)]) at = own;
      }
      cost_[g] = collective_cost(*at, g, across_at_once);
    }
    const auto me = static_cast<std::size_t>(r);
    entered_[me] = clock_[me];
    const double end = start_[g] + cost_[g] + extra_[g];
    comm_[me] += end - clock_[me];
    clock_[me] = end;
  }
}

PredictedRun Replay::predict() {
  bool execution_start = false;
  while (steps_.next(events_, execution_start)) {
    if (execution_start) start_execution();
    std::fill(seen_.begin(), seen_.end(), 0);
    OpKind op = OpKind::compute;
    for (const auto& e : events_) {
      if (e) {
        op = e->op;
        break;
      }
    }
    if (op == OpKind::compute) {
      multiplies();
    } else if (op == OpKind::sendrecv) {
      ring_step();
    } else {
      collective();
    }
  }
  durations_.push_back(clock_[0] - start0_);
  PredictedRun out;
  out.setup_s = setup_end_;
  out.cold_s = durations_.front();
  out.warm_s = durations_.back();
  out.comm_s = comm_;
  out.compute_s = work_;
  return out;
}

}  // namespace

// The run's events carry every size the replay needs: the shape and element size are the
// caller's record of what the dry run ran, not read again here.
PredictedRun predict_time(const MachineModel& model, const ModelPlacement& pl, const DryRun& run,
                          const MatmulShape& /*shape*/, std::size_t /*element_bytes*/, bool train,
                          const FreshMemory& fresh) {
  PredictedRun out = Replay(model, pl, run, train, fresh).predict();
  out.cold_interval = interval_of(model.uncertainty, out.cold_s, true);
  out.warm_interval = interval_of(model.uncertainty, out.warm_s, false);
  return out;
}

}  // namespace distmm

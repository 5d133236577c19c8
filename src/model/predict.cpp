// Replaying a strategy's events on a machine model (model.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "distmm/error.hpp"
#include "distmm/model.hpp"
#include "distmm/plan.hpp"
#include "distmm/sharding.hpp"
#include "model/steps.hpp"

namespace distmm {
namespace {

double log2_ceil(int p) {
  return p <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(p)));
}

// How Open MPI 4.1's coll/tuned (its fixed decision rules, coll_tuned_decision_fixed.c)
// moves a broadcast or a sum-reduce of `bytes` among `p` ranks. Its rules pass no segment
// size, so a chain or pipeline carries the whole message hop after hop.
enum class Route { linear, chain, tree, scatter_allgather };

// One row of a decision table: for groups of fewer than `below` ranks, the algorithm for
// messages under each threshold (ascending), `otherwise` above them all.
struct DecisionRow {
  int below;
  std::initializer_list<std::pair<double, int>> under;
  int otherwise;
};

int decide(std::initializer_list<DecisionRow> rows, int p, double bytes) {
  for (const DecisionRow& row : rows) {
    if (p >= row.below && row.below != 0) continue;
    for (const auto& [threshold, algorithm] : row.under) {
      if (bytes < threshold) return algorithm;
    }
    return row.otherwise;
  }
  return 0;
}

// Both tables number their algorithms alike: 1 linear, 2 chain, 3 pipeline, 4-7 trees
// (reduce's 7, Rabenseifner, a tree's steps here), 8 and 9 scatter then all-gather.
Route route_of(int algorithm) {
  switch (algorithm) {
    case 1:
      return Route::linear;
    case 2:
    case 3:
      return Route::chain;
    case 8:
    case 9:
      return Route::scatter_allgather;
    default:
      return Route::tree;
  }
}

// MPI_Bcast: 1 basic linear, 2 chain, 3 pipeline, 4 split binary tree, 5 binary tree,
// 6 binomial, 7 k-nomial, 8 and 9 scatter then all-gather.
Route broadcast_route(int p, double bytes) {
  const int algorithm = decide({{4,
                                 {{32, 3},
                                  {256, 5},
                                  {512, 3},
                                  {1024, 7},
                                  {32768, 1},
                                  {131072, 5},
                                  {262144, 2},
                                  {524288, 1},
                                  {1048576, 6}},
                                 5},
                                {8, {{64, 5}, {128, 6}, {2048, 5}, {8192, 6}, {1048576, 1}}, 2},
                                {16, {{8, 7}, {64, 5}, {4096, 7}, {16384, 5}, {32768, 6}}, 1},
                                {32, {{4096, 7}, {1048576, 6}}, 8},
                                {64, {{2048, 6}}, 7},
                                {128, {}, 7},
                                {256, {{2, 6}, {16384, 5}, {32768, 1}, {65536, 5}}, 7},
                                {1024, {{16384, 7}, {32768, 4}}, 7},
                                {2048, {{524288, 7}}, 8},
                                {4096, {{262144, 7}}, 8},
                                {0, {{8192, 7}, {16384, 5}, {262144, 7}}, 8}},
                               p, bytes);
  return route_of(algorithm);
}

// MPI_Reduce with MPI_SUM (commutative): 1 linear, 2 chain, 3 pipeline, 4 binary tree,
// 5 binomial, 6 in-order binary tree, 7 Rabenseifner.
Route reduce_route(int p, double bytes) {
  const int algorithm =
      decide({{4, {{8, 7}, {16, 4}, {32, 3}, {262144, 1}, {524288, 3}, {1048576, 2}}, 3},
              {8, {{4096, 4}, {65536, 2}, {262144, 5}, {524288, 1}, {1048576, 5}}, 1},
              {16, {{8192, 4}}, 5},
              {32, {{4096, 4}}, 5},
              {256, {}, 5},
              {512, {{8192, 5}, {16384, 6}}, 5},
              {2048, {}, 5},
              {4096, {{512, 5}, {1024, 6}, {8192, 5}, {16384, 6}}, 5},
              {0, {{16, 5}, {32, 6}, {1024, 5}, {2048, 6}, {8192, 5}, {16384, 6}}, 5}},
             p, bytes);
  return route_of(algorithm);
}

// MPI_Allgatherv: 1 gather then broadcast, 2 Bruck, 3 ring, 4 neighbour exchange, 5 two
// processes (the ring's exchange); by each member's block. Neighbour exchange needs an even
// group (Open MPI falls back to the ring).
enum class Gather { ring, neighbor, bruck };
Gather allgatherv_route(int p, double per_rank) {
  const int algorithm = decide({{3, {{2048, 3}, {4096, 5}, {8192, 3}}, 5},
                                {8, {{256, 1}, {4096, 4}, {8192, 3}, {16384, 4}, {262144, 2}}, 4},
                                {16, {{1024, 1}}, 2},
                                {32, {{128, 1}, {262144, 2}}, 3},
                                {64, {{256, 1}, {8192, 2}}, 3},
                                {128, {{256, 1}, {4096, 2}}, 3},
                                {256, {{1024, 2}, {65536, 4}}, 3},
                                {512, {{1024, 2}}, 3},
                                {1024, {{512, 2}, {1024, 1}, {4096, 2}, {1048576, 4}}, 3},
                                {0, {{4096, 2}}, 4}},
                               p, per_rank);
  switch (algorithm) {
    case 1:
    case 2:
      return Gather::bruck;
    case 4:
      return p % 2 == 0 ? Gather::neighbor : Gather::ring;
    default:
      return Gather::ring;
  }
}

// MPI_Allreduce with MPI_SUM (commutative): 1 linear, 2 reduce then broadcast, 3 recursive
// doubling, 4 ring, 5 segmented ring (no segment size from the rules: a ring), 6 Rabenseifner.
int allreduce_algorithm(int p, double bytes) {
  return decide({{4, {{8, 4}, {4096, 3}, {8192, 4}, {16384, 3}, {65536, 4}, {262144, 5}}, 6},
                 {8, {{16, 4}, {8192, 3}}, 6},
                 {16, {{8192, 3}}, 6},
                 {32, {{64, 5}, {4096, 3}}, 6},
                 {64, {{128, 5}}, 6},
                 {128, {{262144, 3}}, 6},
                 {256, {{131072, 2}, {262144, 3}}, 6},
                 {512, {{4096, 2}}, 6},
                 {2048, {{2048, 2}, {16384, 3}}, 6},
                 {4096, {{2048, 2}, {4096, 5}, {16384, 3}}, 6},
                 {0, {{2048, 2}, {16384, 5}, {32768, 3}}, 6}},
                p, bytes);
}

// MPI_Reduce_scatter with MPI_SUM, by the whole vector: 1 reduce then scatter, 2 recursive
// halving (the far half first), 3 ring, 4 butterfly (the near half first).
int reduce_scatter_algorithm(int p, double bytes) {
  return decide({{4, {{65536, 3}, {131072, 4}}, 3},
                 {8, {{8, 1}, {262144, 2}}, 3},
                 {32, {{262144, 2}}, 3},
                 {64, {{64, 1}, {2048, 2}, {524288, 4}}, 3},
                 {128, {{256, 1}, {512, 2}, {2048, 4}, {4096, 2}}, 4},
                 {256, {{256, 1}, {512, 2}}, 4},
                 {512, {{256, 1}, {1024, 2}}, 4},
                 {1024, {{512, 1}, {2048, 2}, {8192, 4}, {16384, 2}}, 4},
                 {2048, {{512, 1}, {4096, 2}, {16384, 4}, {32768, 2}}, 4},
                 {4096, {{512, 1}, {4096, 2}}, 4},
                 {0, {{1024, 1}, {8192, 2}}, 4}},
                p, bytes);
}

// What the collectives of one group cost, by the algorithm Open MPI picks for the size
// (broadcast, reduce and all-gather: by its decision rules; the others, and every collective
// of a model of the simulator: the cheaper of the small- and large-message algorithms, as
// those rules aim for).
struct Costs {
  const LinkModel& link;  // the group's slowest link (across hosts when it spans them)
  double reduce_Bps;
  bool open_mpi;                     // the model's backend is Open MPI (not the simulator)
  const LinkModel* local = nullptr;  // between members on one host, when it spans hosts

  double t(double bytes) const { return link.time(static_cast<std::uint64_t>(bytes)); }
  double t_local(double bytes) const {
    return (local != nullptr ? *local : link).time(static_cast<std::uint64_t>(bytes));
  }
  double alpha() const { return link.time(0); }
  double sum(double bytes) const { return bytes / reduce_Bps; }

  // `per_host`: the most members on one host (members fill hosts in runs of consecutive
  // ranks, the root's first). Of a binomial broadcast's (or recursive doubling's)
  // ceil(log2 p) steps, those between hosts number ceil(log2 hosts); the others stay on a
  // host, over the local link.
  double collective(OpKind op, int p, double total, int per_host) const {
    if (p <= 1) return 0;
    const double lg = log2_ceil(p), pm = p - 1.0, per = total / p;
    const int hosts = local != nullptr ? (p + per_host - 1) / per_host : 1;
    const double lg_across = local != nullptr ? log2_ceil(hosts) : lg;
    const double lg_within = lg - lg_across;
    // A tree step moving `bytes`, summed over the tree's steps (plus `extra` per step). In
    // a step across hosts, `sharing` messages leave a host at once over its link.
    const auto tree = [&](double bytes, double extra, double sharing) {
      return lg_across * (t(bytes * sharing) + extra) + lg_within * (t_local(bytes) + extra);
    };
    // The root sends to (or receives from) every other member in turn: those on other
    // hosts over the link, one after another.
    const double off_host = local != nullptr ? p - std::min(p, per_host) : 0.0;
    const auto linear = [&](double bytes) {
      return off_host * t(bytes) + (pm - off_host) * t_local(bytes);
    };
    // Member to member in rank order: a hop across at each of the hosts' boundaries.
    const auto chain = [&](double bytes) {
      return (hosts - 1.0) * t(bytes) + (p - hosts) * t_local(bytes);
    };
    // Recursive halving over the largest power of two p2 <= p members: step j moves
    // bytes / 2^j between members d apart, d doubling from 1 (`near_first`) or halving from
    // p2 / 2; a step crosses hosts once d reaches a host's q members, all q sending at once.
    const int q = local != nullptr ? std::min(p, per_host) : p;
    int p2 = 1;
    while (p2 * 2 <= p) p2 *= 2;
    const auto halving = [&](double bytes, bool near_first, bool reduce) {
      double cost = 0, part = bytes;
      for (int step = 1; step < p2; step *= 2) {
        part /= 2;
        const int d = near_first ? step : p2 / (2 * step);
        cost +=
            (local != nullptr && d >= q ? t(part * q) : t_local(part)) + (reduce ? sum(part) : 0.0);
      }
      return cost;
    };
    // The p - p2 members beyond the power of two first pass their whole vector to a
    // neighbour (summed there) and get their result back from it at the end.
    const auto fold = [&](double bytes, bool whole_back) {
      if (p2 == p) return 0.0;
      const double hop = q == 1 ? t(bytes) : t_local(bytes);
      return hop + sum(bytes) +
             (q == 1 ? t(whole_back ? bytes : per) : t_local(whole_back ? bytes : per));
    };
    switch (op) {
      case OpKind::barrier:
      case OpKind::split:
        return 2 * lg * alpha();
      case OpKind::broadcast: {
        const double binomial = tree(total, 0, 1);  // one sender per host and step
        // Large: scatter (binomial) then a ring all-gather (van de Geijn).
        const double scatter_allgather = lg * alpha() + pm * per / bw(per) + pm * t(per);
        if (!open_mpi) return std::min(binomial, scatter_allgather);
        switch (broadcast_route(p, total)) {
          case Route::linear:
            return linear(total);
          case Route::chain:
            return chain(total);
          case Route::scatter_allgather:
            return scatter_allgather;
          case Route::tree:
            break;
        }
        return binomial;
      }
      case OpKind::scatterv:
      case OpKind::gatherv:
        return pm * t(per);  // linear at the root: one message after another
      case OpKind::allgatherv: {
        const double ring = pm * t(per);
        if (!open_mpi) return std::min(ring, lg * alpha() + pm * per / bw(per));
        switch (allgatherv_route(p, per)) {
          case Gather::ring:
            return ring;  // each step: one block over each host's link
          case Gather::neighbor: {
            // p / 2 steps: one block with the neighbour on one side, then two with the other's.
            // Across hosts the first and the last member of each host exchange with another
            // host (one member per host: every member).
            if (local == nullptr) return t(per) + (p / 2 - 1) * t(2 * per);
            const double first = q % 2 == 0 ? t_local(per) : t(per);
            const int crossing = q == 1 ? 1 : 2;
            return first + (p / 2 - 1) * t(2.0 * crossing * per);
          }
          case Gather::bruck: {
            // ceil(log2 p) steps: at distance d each member sends d blocks (the rest, last) to
            // member - d: on another host for the first min(q, d) members of each host.
            double cost = 0;
            for (int d = 1; d < p; d *= 2) {
              const double blocks = std::min(d, p - d);
              cost += t((local != nullptr ? std::min(q, d) : 1) * blocks * per);
            }
            return cost;
          }
        }
        return ring;
      }
      case OpKind::allreduce: {
        // Every rank exchanges in every step: across hosts, all of a host's ranks at once.
        const double doubling = tree(total, sum(total), local != nullptr ? per_host : 1);
        const double ring = 2 * pm * t(per) + pm * sum(per);
        if (!open_mpi) return std::min(doubling, ring);
        switch (allreduce_algorithm(p, total)) {
          case 1:
            return linear(total) + pm * sum(total) + linear(total);
          case 2:
            return collective(OpKind::reduce, p, total, per_host) +
                   collective(OpKind::broadcast, p, total, per_host);
          case 3:
            return doubling;
          case 6:
            // Rabenseifner: a reduce-scatter by vector halving and distance doubling, then
            // an all-gather back the same way (the halves between near members).
            return fold(total, true) + halving(total, true, true) + halving(total, true, false);
          default:
            return ring;
        }
      }
      case OpKind::reduce_scatter: {
        const double ring = pm * (t(per) + sum(per));
        if (!open_mpi) return ring;
        switch (reduce_scatter_algorithm(p, total)) {
          case 1:
            return collective(OpKind::reduce, p, total, per_host) + linear(per);
          case 2:
            return fold(total, false) + halving(total, false, true);
          case 4:
            return fold(total, false) + halving(total, true, true);
          default:
            return ring;
        }
      }
      case OpKind::reduce:
        // Each member's message summed once on arrival. Measured over 2 hosts of 2 ranks
        // at 200 Mbit/s: 128 MiB (linear) 11.7 s, two crossings of the link; 512 KiB
        // (binomial) one crossing.
        if (!open_mpi) return lg * (t(total) + sum(total));
        switch (reduce_route(p, total)) {
          case Route::linear:
            return linear(total) + pm * sum(total);
          case Route::chain:
            return chain(total) + pm * sum(total);
          case Route::scatter_allgather:
          case Route::tree:
            break;
        }
        return tree(total, sum(total), 1);
      default:
        return 0;
    }
  }
  // The bandwidth of the piece serving messages of `bytes`.
  double bw(double bytes) const {
    for (const LinkPiece& p : link.pieces) {
      if (bytes <= static_cast<double>(p.max_bytes)) return p.bandwidth_Bps;
    }
    return link.pieces.back().bandwidth_Bps;
  }
};

// The share of GemmModel::first_call_s (measured at 1024^3) that a first multiply of this
// shape pays: the first touch of the library's packing buffers, which grow with the panels
// it packs. distmm's multiplies call BLAS as C^T = B^T A^T (BLAS's M = cols, N = rows, K =
// inner). OpenBLAS 0.3.21 (Debian's, Haswell kernels) packs a K-block of 256 of an M-block
// (512; an M under twice that in two halves; each thread its own) and of the whole N-panel
// (up to 65024: its buffer's size), in doubles. One thread with all of M in one block packs
// the N-panel a few columns (24) at a time into the same place, as nothing packed is used
// again (page faults of a first call, one thread: 16384 x 512 times 512 x 64 as distmm calls
// it, 59, where the whole panel is 6944; 2 threads 8248; one thread with M = 513, 8336).
double blas_packed_elements(double rows, double inner, double cols, int threads) {
  const double m = cols, n = rows, k = std::min(inner, 256.0);
  const double m_block = threads > 1 ? std::min(m, 512.0 * threads)
                         : m <= 512  ? m
                         : m < 1024  ? std::ceil(m / 8) * 4
                                     : 512;
  const double n_panel = threads == 1 && m <= 512 ? std::min(n, 24.0) : std::min(n, 65024.0);
  return k * (n_panel + m_block);
}

double blas_first_call_share(double rows, double inner, double cols, int threads) {
  return blas_packed_elements(rows, inner, cols, threads) /
         blas_packed_elements(1024, 1024, 1024, threads);
}

// A measured curve's first-use figure per byte is carried beyond its largest point only
// when that point is this big.
constexpr std::uint64_t kReliableFirstUseBytes = 16u << 20;

// How much faster a columns call moves columns of rows `row_bytes` long than calibrate's did
// at its size: each of the curve's points at the copy rate of its own row length (its rows as
// calibrate laid them out), interpolated in the logarithm of the size between the two points
// around `bytes` and held beyond the ends.
double strided_copy_ratio(const MachineModel& model, const CollectiveCurve& curve,
                          std::uint64_t bytes, std::uint64_t row_bytes) {
  const double run = model.strided_copy_rate(static_cast<double>(row_bytes));
  const auto at = [&](const CollectivePoint& pt) {
    return model.strided_copy_rate(static_cast<double>(calibration_row_bytes(pt.bytes))) / run;
  };
  if (curve.points.empty() || run <= 0) return 1.0;
  return interpolate_in_log(
      curve.points, static_cast<double>(bytes),
      [](const CollectivePoint& pt) { return static_cast<double>(pt.bytes); }, at);
}

}  // namespace

std::string group_name(const PlannedRun& run, int group) {
  if (group == 0) return "world";
  std::ostringstream out;
  out << "ranks ";
  const auto& members = run.groups[static_cast<std::size_t>(group)];
  for (std::size_t i = 0; i < members.size(); ++i) out << (i ? "," : "") << members[i];
  out << " of world";
  return out.str();
}

namespace {

// The strategy's dry run: `executions` executions of its plan, or training steps.
DryRun dry_events(const Strategy& strategy, const MatmulShape& shape, int ranks,
                  std::size_t element_bytes, const StrategySettings& settings,
                  std::size_t executions, bool train) {
  const DataType type = element_bytes == 8 ? DataType::f64 : DataType::f32;
  if (!train) return dry_run(strategy, shape, ranks, type, settings, executions);
  TrainConfig config;
  config.settings = settings;
  return dry_train(strategy, shape, ranks, type, config, executions);
}

}  // namespace

PlannedRun planned_events(const Strategy& strategy, const MatmulShape& shape, int ranks,
                          std::size_t element_bytes, const StrategySettings& settings,
                          std::size_t executions, bool train) {
  const DryRun dry = dry_events(strategy, shape, ranks, element_bytes, settings, executions, train);
  PlannedRun run;
  run.groups = dry.groups;
  for (const DryRank& rank : dry.ranks) run.ranks.push_back(rank.events.expand());
  return run;
}

PredictedRun predict_time(const MachineModel& model, const ModelPlacement& pl,
                          const Strategy& strategy, const MatmulShape& shape,
                          std::size_t element_bytes, const StrategySettings& settings, bool train,
                          const FreshMemory& fresh) {
  // Executions (or steps) replayed: the first is cold, the last warm.
  const DryRun run =
      dry_events(strategy, shape, pl.ranks, element_bytes, settings, train ? 3 : 2, train);
  return predict_time(model, pl, run, shape, element_bytes, train, fresh);
}

PredictedRun predict_time(const MachineModel& model, const ModelPlacement& pl, const DryRun& run,
                          const MatmulShape& shape, std::size_t element_bytes, bool train,
                          const FreshMemory& fresh) {
  const int p = pl.ranks;
  const int hosts = (p + pl.ranks_per_host - 1) / pl.ranks_per_host;
  if (hosts > 1 && model.inter.pieces.empty()) {
    throw InputError(model_label(model) + ": the ranks span " + std::to_string(hosts) +
                         " hosts but the model has no links.inter (calibrate across hosts, or "
                         "write one)",
                     -1, "--model");
  }
  const GemmModel& gemm = model.gemm_for(pl.blas_threads);
  model::Steps steps(run);
  const auto& groups = run.groups;
  // Per group: does it span hosts, and how many of its ranks share the busiest host.
  std::vector<bool> spans(groups.size(), false);
  std::vector<int> per_host(groups.size(), 0);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& members = groups[g];
    for (int r : members) spans[g] = spans[g] || pl.host_of(r) != pl.host_of(members.front());
    // Members are consecutive runs of ranks per host: count the largest run on one host.
    for (int r : members) {
      const int mine = static_cast<int>(std::count_if(
          members.begin(), members.end(), [&](int o) { return pl.host_of(o) == pl.host_of(r); }));
      per_host[g] = std::max(per_host[g], mine);
      if (members.size() > 64) break;  // large groups: the first member's host is typical
    }
  }
  std::vector<const CollectiveCurve*> group_curve(groups.size(), nullptr);
  // A broadcast or scatter whose members multiply next: its contiguous form's kThenCompute
  // curve and plain curve, and the longest multiply a member does next.
  std::vector<const CollectiveCurve*> group_then(groups.size(), nullptr),
      group_plain(groups.size(), nullptr);
  // A columns collective's contiguous counterpart (scatterv, gatherv), or nullptr.
  std::vector<const CollectiveCurve*> group_contiguous(groups.size(), nullptr);
  std::vector<double> group_next_multiply(groups.size(), 0.0);
  // Its members' next multiplies are ring steps, each waiting on its neighbours.
  std::vector<char> group_ring(groups.size(), 0);
  const bool open_mpi = model.backend == "mpi";
  const Costs intra{model.intra, model.reduce_Bps, open_mpi};
  const Costs inter{hosts > 1 ? model.inter : model.intra, model.reduce_Bps, open_mpi,
                    hosts > 1 ? &model.intra : nullptr};
  // More ranks (times their BLAS threads) on a host than cores: each multiply gets a share.
  const int on_host = std::min(p, pl.ranks_per_host);
  // The curve was measured with gemm.concurrent ranks multiplying at once on a host: scale
  // by how much more (or less) the run's ranks share the cores than that.
  const auto share = [&](int ranks) {
    return std::max(1.0, static_cast<double>(ranks * pl.blas_threads) / model.cores_per_host);
  };
  const double oversubscribed = share(on_host) / share(gemm.concurrent);
  // Of a member served `late` seconds after the rest, what the host's multiplies that follow
  // lose. With no more ranks than cores, all of it. With more, the ranks share the cores
  // throughout (a waiting Open MPI rank polls, yielding, and so do the simulator's threads):
  // the rest multiply meanwhile, and the late one ends `late` times cores over ranks after
  // them (its lateness is at most its multiply, see the caller). Measured, mpirun -np 4 on
  // 2 cores, as the barrier-to-last-multiply time of the collective and the multiplies against
  // the two apart: a 2 MiB broadcast before 64 x 4096 x 1024 multiplies lost 3.8-8.4 ms where
  // broadcast_then_compute's excess read 12; a 2 MiB scatter before 16 x 4096 x 4096 ones
  // 2.1-2.9 of 10.5; 12 MB before 1000 x 1500 x 175 ones 0-6 of 8.5, before 250 x 1500 x 700
  // ones 6.6-7.5 of 9.7.
  const double late_share_lost = 1.0 / share(on_host);
  // Every rank's multiply as long as the slowest's of the run's ranks is expected to be.
  const double straggle = straggler_factor(model.straggler, p);
  bool cold = false;
  // The process's first multiply on each rank sets up the BLAS library's buffers (the first
  // strategy a process runs pays it).
  std::vector<char> multiplied(static_cast<std::size_t>(p), fresh.caller ? 0 : 1);
  // A multiply's time at the curve's rate, as the run's ranks share the cores. The rate by
  // shape, kept: a run's ranks multiply a few shapes many times, and each rate is several
  // interpolations in log space (fsdp-overlap on 4096 ranks, 1e6^3: 4096 ring steps on each
  // rank, 6.3 s of prediction, 43 % of it in them).
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, double> rates;
  const auto multiply_s = [&](const PlannedEvent& e) {
    const double flops = 2.0 * static_cast<double>(e.rows) * static_cast<double>(e.inner) *
                         static_cast<double>(e.cols);
    if (flops == 0) return 0.0;
    auto [at, added] = rates.try_emplace({e.rows, e.inner, e.cols}, 0.0);
    if (added) {
      at->second = gemm.rate(static_cast<double>(e.rows), static_cast<double>(e.inner),
                             static_cast<double>(e.cols));
    }
    return flops / (at->second * 1e9) * oversubscribed * straggle;
  };
  const auto compute_s = [&](int rank, const PlannedEvent& e) {
    if (e.rows * e.inner * e.cols == 0) return 0.0;
    double setup_blas = 0;
    if (!multiplied[static_cast<std::size_t>(rank)]) {
      multiplied[static_cast<std::size_t>(rank)] = 1;
      const double rows = static_cast<double>(e.rows), inner = static_cast<double>(e.inner),
                   cols = static_cast<double>(e.cols);
      // At least the first touch of the packing buffers' pages (OpenBLAS packs in doubles),
      // as many ranks at once as share the host's cores: calibrate measures the first call
      // rank by rank, and in the simulator, whose ranks share one process, each rank after
      // the first got the buffer the one before had touched (0 s), while a run's rank
      // threads, multiplying at once, each touch a buffer of their own (1288 first-execution
      // page faults on each of 4 ranks, 2048 x 256 x 8192 each; 14 us a page on this
      // machine). Under Open MPI the two agree: 0.0105 s measured at 1024^3, 768 pages at
      // 14.4 us.
      const double touch = blas_packed_elements(rows, inner, cols, gemm.threads) * 8.0 / 4096.0 *
                           model.first_touch_s_per_page * share(on_host);
      setup_blas = std::max(
          gemm.first_call_s * blas_first_call_share(rows, inner, cols, gemm.threads), touch);
    }
    const double operands =
        static_cast<double>(e.rows * e.inner + e.inner * e.cols + e.rows * e.cols) *
        static_cast<double>(element_bytes);
    const double first = cold ? operands / 4096.0 * gemm.first_use_s_per_page : 0.0;
    return multiply_s(e) + first + setup_blas;
  };

  PredictedRun out;
  out.comm_s.assign(static_cast<std::size_t>(p), 0.0);
  out.compute_s.assign(static_cast<std::size_t>(p), 0.0);
  std::vector<double> clock(static_cast<std::size_t>(p), 0.0), entered(clock), comm(clock),
      work(clock), contention(clock);
  std::vector<double> group_start(groups.size()), group_extra(groups.size()),
      group_cost(groups.size());
  std::vector<char> group_seen(groups.size());
  std::vector<std::optional<PlannedEvent>> events(static_cast<std::size_t>(p));
  // Each rank's last communication (an all-gather right after a scatter has a curve of its
  // own: across hosts it can run at half the rate).
  std::vector<OpKind> last_comm(static_cast<std::size_t>(p), OpKind::barrier);
  std::vector<double> durations;  // of each execution (or step), on rank 0's clock
  double setup_end = 0, start0 = 0;
  std::size_t next_start = 0;
  const auto finish_execution = [&] { durations.push_back(clock[0] - start0); };
  // The cold execution: its buffers' first use by the link and by the multiply (every byte
  // of the first execution counts).
  const auto fresh_part = [&](const PlannedEvent& e) {
    return e.caller_buffers && !fresh.caller ? 0.0 : 1.0;
  };
  const auto first_use = [&](const PlannedEvent& e, const LinkModel& link) {
    // Only memory new to the process: a plan set up after others gets much of its memory from
    // what they freed, used for communication already.
    if (!cold) return 0.0;
    // A ring shift's two messages move at once (each rank copies its incoming one).
    const std::uint64_t bytes = e.op == OpKind::sendrecv ? std::max(e.bytes_sent, e.bytes_received)
                                                         : e.bytes_sent + e.bytes_received;
    return static_cast<double>(bytes) / 4096.0 * link.first_use_s_per_page * fresh_part(e);
  };
  // The bytes a rank's cold execution (or step) uses again after setup populated more: its
  // plan's buffers (and a step's gradients) and, on the root, A and C (X and T) where no plan
  // has used them before; not B or its shard, which setup writes last (placing it).
  // Measured, --ranks 2 64 x 4096 x 4096: dp's cold execution took 10-17 ms longer than a
  // warm one, its 128 MiB copy of B on each rank populated at setup.
  // What rank r's plan (a training step's buffers) allocates.
  const auto rank_of = [&](int r) -> const DryRank& {
    return run.ranks[static_cast<std::size_t>(r)];
  };
  const auto allocated = [&](int r) { return rank_of(r).allocated_bytes; };
  const auto revisited_bytes = [&](int r) {
    const std::uint64_t m = shape.m, k = shape.k, n = shape.n;
    std::uint64_t bytes = allocated(r) - rank_of(r).parameter_bytes;
    // Nor, in a matmul plan, the buffer it allocates last: nothing populated after it (fsdp's
    // and hsdp's 128 MiB gather buffer on each rank, 64 x 4096 x 4096, cost next to nothing
    // cold; counted, --ranks 2 predicted them +71 %).
    if (!train) bytes -= rank_of(r).last_buffer_bytes;
    if (r == 0 && fresh.caller) bytes += (m * k + m * n) * element_bytes;
    return bytes;
  };
  // The bytes each host's ranks hold when the cold execution (or step) starts: their plans'
  // buffers (a step's gradients) and the root's A, B and C (X, W and T). Fresh memory beyond
  // the host's pool costs the more per page (model.first_touch_pool_bytes).
  std::vector<double> held(static_cast<std::size_t>(hosts), 0.0);
  const double beyond_more_s =
      model.first_touch_pool_bytes > 0
          ? std::max(0.0, model.first_touch_beyond_s_per_page - model.first_touch_s_per_page)
          : 0.0;
  const auto hold_setup = [&] {
    const std::uint64_t m = shape.m, k = shape.k, n = shape.n;
    for (int r = 0; r < p; ++r) {
      double bytes = static_cast<double>(allocated(r));
      if (r == 0) bytes += static_cast<double>((m * k + k * n + m * n) * element_bytes);
      held[static_cast<std::size_t>(pl.host_of(r))] += bytes;
    }
  };
  // What a cold collective's `pages` fresh pages on rank r's host (its library's
  // temporaries, calibrate counted them) cost more for those beyond the pool; they count as
  // held from then on. mpirun -np 4, tp-row 8192 x 256 x 8192: Open MPI's linear reduce
  // populates two 512 MiB temporaries at the root while the host holds 2.6 GiB: 5.7 s cold,
  // against 0.49 s at 64 MiB (8 times that: 3.9).
  const auto beyond_pool_s = [&](int r, double pages) {
    if (beyond_more_s <= 0 || pages <= 0) return 0.0;
    double& h = held[static_cast<std::size_t>(pl.host_of(r))];
    const double added = pages * 4096.0;
    const double over = std::clamp(h + added - model.first_touch_pool_bytes, 0.0, added);
    h += added;
    return over / 4096.0 * beyond_more_s;
  };
  // How long rank r's multiply right after the step just read takes (0: its next event is no
  // multiply), and whether it is a ring step's (fsdp-overlap's sendrecv next, its multiply on
  // the helper thread beside it).
  struct NextMultiply {
    double s = 0;
    bool ring = false;
  };
  const auto next_multiply = [&](int r) -> NextMultiply {
    const PlannedEvent* next = steps.upcoming(r);
    if (next == nullptr) return {};
    if (next->op == OpKind::compute) return {multiply_s(*next), false};
    if (next->op != OpKind::sendrecv) return {};
    const PlannedEvent* after = steps.upcoming(r, 1);
    if (after == nullptr || after->op != OpKind::compute || !after->overlapped) return {};
    return {multiply_s(*after), true};
  };
  bool execution_start = false;
  while (steps.next(events, execution_start)) {
    if (execution_start) {
      cold = next_start == 0;
      if (next_start == 0) {
        setup_end = *std::max_element(clock.begin(), clock.end());
        if (beyond_more_s > 0) hold_setup();
      } else {
        finish_execution();
      }
      ++next_start;
      if (!train || cold) {
        // The program's barrier before each execution (training: before the first step)
        // lines the ranks up.
        const double at = *std::max_element(clock.begin(), clock.end());
        std::fill(clock.begin(), clock.end(), at);
        std::fill(last_comm.begin(), last_comm.end(), OpKind::barrier);
      }
      start0 = clock[0];
      if (cold && model.revisit_s_per_page > 0) {
        // Each rank's buffers, populated at setup and used again now: once per page, as many
        // ranks at once as the host has cores.
        for (int r = 0; r < p; ++r) {
          clock[static_cast<std::size_t>(r)] += static_cast<double>(revisited_bytes(r)) / 4096.0 *
                                                model.revisit_s_per_page * share(on_host);
        }
      }
      std::fill(comm.begin(), comm.end(), 0.0);
      std::fill(work.begin(), work.end(), 0.0);
    }
    std::fill(group_seen.begin(), group_seen.end(), 0);
    const OpKind op = [&] {
      for (const auto& e : events) {
        if (e) return e->op;
      }
      return OpKind::compute;
    }();
    if (op == OpKind::compute) {
      for (int r = 0; r < p; ++r) {
        const auto& e = events[static_cast<std::size_t>(r)];
        if (!e) continue;
        const double t = compute_s(r, *e);
        auto& c = clock[static_cast<std::size_t>(r)];
        work[static_cast<std::size_t>(r)] += t;
        // A multiply on the helper thread started when the rank entered its sendrecv: the
        // longer of the two, plus the link's contention times the shorter.
        if (e->overlapped) {
          const double start = entered[static_cast<std::size_t>(r)], exchange = c - start;
          c = start + std::max(exchange, t) +
              contention[static_cast<std::size_t>(r)] * std::min(exchange, t);
        } else {
          c += t;
        }
      }
      continue;
    }
    if (op == OpKind::sendrecv) {
      const std::vector<double> before = clock;
      // Every rank of a host copies its incoming message at once, the first use of the
      // buffers included (CPU work): with more ranks than cores each gets its share
      // (mpirun -np 4 on 2 cores, fsdp-overlap 64 x 4096 x 4096: its cold ring steps took
      // 100 ms more than warm ones, 12 us a page of each new 32 MiB buffer, against the
      // 4.8 us a page of a ping-pong's first use, one rank copying).
      const double copying = std::max(1.0, static_cast<double>(on_host) / model.cores_per_host);
      for (int r = 0; r < p; ++r) {
        const auto& e = events[static_cast<std::size_t>(r)];
        if (!e) continue;
        const auto me = static_cast<std::size_t>(r);
        const Costs& c =
            pl.host_of(e->peer_to) != pl.host_of(r) || pl.host_of(e->peer_from) != pl.host_of(r)
                ? inter
                : intra;
        // Every rank shifts at once: the link's time for each message, as calibrated for such
        // an exchange.
        const double slowdown = c.link.exchange_slowdown;
        const double out_done = std::max(before[me], before[static_cast<std::size_t>(e->peer_to)]) +
                                slowdown * c.t(static_cast<double>(e->bytes_sent)) +
                                first_use(*e, c.link) * copying;
        const double in_done =
            std::max(before[me], before[static_cast<std::size_t>(e->peer_from)]) +
            slowdown * c.t(static_cast<double>(e->bytes_received));
        entered[me] = before[me];
        last_comm[me] = OpKind::sendrecv;
        contention[me] = c.link.overlap_contention;
        clock[me] = std::max(out_done, in_done);
        comm[me] += clock[me] - before[me];
      }
      continue;
    }
    // A collective: each group starts when its last member arrives and ends together.
    std::fill(group_extra.begin(), group_extra.end(), 0.0);
    for (int r = 0; r < p; ++r) {
      const auto& e = events[static_cast<std::size_t>(r)];
      if (!e) continue;
      const auto g = static_cast<std::size_t>(e->group);
      group_start[g] = group_seen[g] ? std::max(group_start[g], clock[static_cast<std::size_t>(r)])
                                     : clock[static_cast<std::size_t>(r)];
      const NextMultiply next = next_multiply(r);
      group_next_multiply[g] = group_seen[g] ? std::max(group_next_multiply[g], next.s) : next.s;
      group_ring[g] = static_cast<char>((group_seen[g] && group_ring[g] != 0) || next.ring);
      group_seen[g] = 1;
    }
    // A collective calibration measured (same op, group size and spread, as many groups at
    // once) costs what it measured; others are costed from the links.
    const int concurrent = static_cast<int>(std::count(group_seen.begin(), group_seen.end(), 1));
    // Groups with one rank per host spanning hosts at once (hsdp's replica groups): a host's
    // ranks, one in each, send over its link together.
    int across_at_once = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      across_at_once += group_seen[g] == 1 && spans[g] && per_host[g] == 1;
    }
    for (int r = 0; r < p; ++r) {
      const auto& e = events[static_cast<std::size_t>(r)];
      if (!e) continue;
      const auto g = static_cast<std::size_t>(e->group);
      if (group_seen[g] != 1) continue;
      group_seen[g] = 2;  // looked up
      const int size = static_cast<int>(groups[g].size());
      group_curve[g] = group_plain[g] = group_then[g] = group_contiguous[g] = nullptr;
      if (size < 2) continue;
      if (e->op == OpKind::allgatherv &&
          last_comm[static_cast<std::size_t>(r)] == OpKind::scatterv) {
        group_curve[g] = model.collective(kAllgathervAfterScatterv, size, per_host[g], concurrent);
      }
      if (group_curve[g] == nullptr) {
        group_curve[g] =
            model.collective(collective_name(e->op, e->strided), size, per_host[g], concurrent);
      }
      if (e->strided) {
        group_contiguous[g] =
            model.collective(collective_name(e->op, false), size, per_host[g], concurrent);
      }
      // A broadcast or scatter whose members multiply next (with more ranks than cores the
      // members served first take the cores from the rest): the excess of the contiguous
      // call's then-compute curve over its plain one. It serves the scatter of columns too
      // (tp-row's, which calibrate times plainly): mpirun -np 4 on 2 cores, 64 x 4096 A's
      // columns (2 MiB) took 18-21 ms at the root before the multiplies, the plain curve 1.5.
      if ((e->op == OpKind::scatterv || e->op == OpKind::broadcast) && group_next_multiply[g] > 0) {
        group_then[g] = model.collective(collective_name(e->op, false) + kThenCompute, size,
                                         per_host[g], concurrent);
        // Below its first size (4 KiB from calibrate) the plain collective's curve serves.
        if (group_then[g] != nullptr && (group_then[g]->points.empty() ||
                                         e->total_bytes < group_then[g]->points.front().bytes)) {
          group_then[g] = nullptr;
        }
        group_plain[g] = group_then[g] == nullptr ? nullptr
                                                  : model.collective(collective_name(e->op, false),
                                                                     size, per_host[g], concurrent);
      }
    }
    for (int r = 0; r < p; ++r) {
      const auto& e = events[static_cast<std::size_t>(r)];
      if (!e) continue;
      const auto g = static_cast<std::size_t>(e->group);
      // A cold collective waits for its slowest member's first use of its buffers.
      const LinkModel& link = (spans[g] ? inter : intra).link;
      double extra = 0;
      if (!cold) {
        extra = 0;
      } else if (group_curve[g] == nullptr) {
        extra = first_use(*e, link);
      } else if (const CollectivePoint& last = group_curve[g]->points.back();
                 e->total_bytes <= last.bytes || last.bytes >= kReliableFirstUseBytes) {
        extra = group_curve[g]->first_use(e->total_bytes) * fresh_part(*e);
        extra += beyond_pool_s(r, group_curve[g]->first_use_pages(e->total_bytes) * fresh_part(*e));
      } else if (e->op == OpKind::reduce && last.bytes > 0) {
        // A reduce's root combines into fresh memory, a pass of its own after the bytes
        // arrive, where a gather's fresh pages fill as fast as the link brings them: beyond
        // its largest call each page of the call costs that call's first use per page, at
        // most a first touch (a stall in it carried no further). 2 hosts at 1 Gbit/s, 1 rank
        // per host: the 2 MiB reduce's first use read 5.7 ms (11 us a page); tp-row
        // 4096 x 128 x 4096 cold, whose 128 MiB reduce the links' figure had charged 0.10 s,
        // took 0.37-0.44 s longer than warm in four validation runs, predicted -15 to -23 %
        // there, now -12 to +9 % (re-predicted with their models; every tp-row case at
        // 1 Gbit/s cold moved toward 0, none at 200 Mbit/s by more than 3 points).
        const double last_pages = static_cast<double>(last.bytes) / 4096.0;
        const double per_page =
            std::min(last.first_use_s / last_pages, model.first_touch_s_per_page);
        extra = (last.first_use_s +
                 per_page * static_cast<double>(e->total_bytes - last.bytes) / 4096.0) *
                fresh_part(*e);
      } else {
        // A sweep cut short on a slow link: its small calls' first-use figures are noise
        // (a TCP stall), no per-byte rate to carry on; the links' per page beyond it.
        const double beyond =
            static_cast<double>(e->total_bytes - last.bytes) / static_cast<double>(e->total_bytes);
        extra = last.first_use_s * fresh_part(*e) + first_use(*e, link) * beyond;
      }
      group_extra[g] = std::max(group_extra[g], extra);
    }
    for (int r = 0; r < p; ++r) {
      const auto& e = events[static_cast<std::size_t>(r)];
      if (!e) continue;
      const auto g = static_cast<std::size_t>(e->group);
      // A collective costs every member of its group the same: costed at its first member
      // (a gather's root-by-member sum on 4096 ranks, costed at each, had taken seconds).
      if (group_seen[g] != 3) {
        group_seen[g] = 3;
        group_cost[g] = [&] {
          const auto& members = groups[g];
          const int size = static_cast<int>(members.size());
          const Costs& c = spans[g] ? inter : intra;
          // From the links, by the algorithm Open MPI picks. A group with one rank per host
          // shares each link with the other such groups at work (every one of its messages
          // crosses hosts): its bytes as many times over (at 200 Mbit/s, 2 hosts of 2 ranks, the
          // two replica groups' all-reduce of 256 KiB took 29 ms, one alone's links 11).
          const double sharing = spans[g] && per_host[g] == 1 ? std::max(1, across_at_once) : 1;
          // `row_bytes`: the rows a columns call's matrix has (a run's, or calibrate's); 0: the
          // call moves contiguous blocks.
          const auto from_links_rows = [&](double total, double row_bytes) {
            double cost = c.collective(e->op, size, total * sharing, per_host[g]);
            if ((e->op == OpKind::scatterv || e->op == OpKind::gatherv) && size > 1) {
              // Linear at the root: one message to (or from) each other member, over its link.
              const int root_host = pl.host_of(members[static_cast<std::size_t>(e->root)]);
              const double per = total / size;
              cost = 0;
              for (int member : members) {
                if (member == members[static_cast<std::size_t>(e->root)]) continue;
                cost += pl.host_of(member) == root_host ? intra.t(per) : inter.t(per * sharing);
              }
            }
            if (const double strided_Bps = model.strided_copy_rate(row_bytes);
                e->strided && row_bytes > 0 && strided_Bps > 0) {
              // Open MPI: the root packs (or unpacks) the other members' columns element by
              // element, one member after another. The simulator: each member copies its own
              // columns, as many at once as the host has cores (4 ranks on 2 cores, tp-col
              // 8192 x 256 x 8192 costed as the root's copies: 1.03 s predicted, 0.84 measured).
              const double copiers = open_mpi ? 1.0 : std::clamp(size - 1, 1, model.cores_per_host);
              cost += total * (size - 1) / size / strided_Bps / copiers;
            }
            return cost;
          };
          const double total = static_cast<double>(e->total_bytes);
          const auto from_links = [&](double bytes) {
            return from_links_rows(bytes, static_cast<double>(e->row_bytes));
          };
          const auto curve_time = [&](const CollectiveCurve& curve) {
            return curve.time(e->total_bytes, model.intra.pieces.empty()
                                                  ? std::function<double(double)>{}
                                                  : from_links);
          };
          double cost = 0;
          if (group_curve[g] == nullptr) {
            cost = from_links(total);
          } else {
            cost = curve_time(*group_curve[g]);
            // Calibrate moved columns of matrices with rows of a power of two doubles (a multiple
            // of 4 KiB from 512 of them), which copy several times slower than others: a columns
            // call's excess over its contiguous form scaled by the copy rates of the two row
            // lengths (mpirun -np 2, tp-col 3000 x 1000 x 3000's 72 MB gather of C took 10 ms,
            // 2048 x 1000 x 4096's 64 MiB 52 ms; the curve said 50-55 for both).
            if (group_contiguous[g] != nullptr && e->row_bytes > 0 && !model.strided_copy.empty()) {
              // Beyond its largest call the curve goes on at the links' cost with calibrate's rows
              // (the run's rate comes in below, once).
              const CollectiveCurve& columns = *group_curve[g];
              if (!model.intra.pieces.empty() && !columns.points.empty()) {
                const auto rows =
                    static_cast<double>(calibration_row_bytes(columns.points.back().bytes));
                cost = columns.time(e->total_bytes,
                                    [&](double bytes) { return from_links_rows(bytes, rows); });
              }
              const double contiguous =
                  model.intra.pieces.empty()
                      ? curve_time(*group_contiguous[g])
                      : group_contiguous[g]->time(e->total_bytes, [&](double bytes) {
                          return from_links_rows(bytes, 0);
                        });
              if (contiguous < cost) {
                cost = contiguous + (cost - contiguous) * strided_copy_ratio(model, *group_curve[g],
                                                                             e->total_bytes,
                                                                             e->row_bytes);
              }
            }
          }
          if (group_then[g] != nullptr && group_plain[g] != nullptr) {
            // Calibrate's members multiply after their part for longer than the call takes, and
            // take the cores from the rest throughout; a run's members hinder the rest only
            // while their own next multiply lasts: the excess over the plain call in proportion
            // (tp-col 32 x 2048 x 2048, 2 hosts of 2 ranks at 1 Gbit/s: a 512 KiB broadcast
            // costed 17.8 ms from the curve, 8.9 ms measured at its root, with 3.3 ms multiplies
            // after it).
            const double then = curve_time(*group_then[g]), plain = curve_time(*group_plain[g]);
            if (plain < then) {
              const double late = (then - plain) * std::min(1.0, group_next_multiply[g] / then);
              // Ring steps wait on each neighbour: no one gets ahead while a member is late
              // (mpirun -np 4 on 2 cores, fsdp-overlap 1000 x 1500 x 700: its root's 12 MB
              // scatter of A took 6.9-8.5 ms, the plain curve 1, and the ring steps after it
              // 6.7 ms each, as predicted).
              // Nor after Open MPI's scatter of columns (tp-row's): the root packs and sends
              // each member's columns in turn and is the last to start its multiply, and
              // nothing after makes up for it. mpirun -np 4 on 2 cores, tp-row 1000 x 1500 x 700
              // warm: 41.5, 44.4 and 45.6 ms in three validation runs, 40-49 ms in 11 of 14
              // processes by hand and 30-31 in 3; traced, the root's scatter 18-28 ms (members
              // served first 1-14 ms), then its multiply 10-21 ms (11 on a core of its own) and the
              // reduce 5-10 ms; predicted 27-32 ms with the share. Re-predicting six validation
              // runs with their own models, the setting's warm worst went 28.7 / 26.3 / 29.0 / 38.5
              // % to 22.3 / 19.3 / 19.9 / 31.4 % (the other two unchanged).
              cost += late * (group_ring[g] || (open_mpi && e->strided) ? 1.0 : late_share_lost);
            }
          }
          return cost;
        }();
      }
      const double cost = group_cost[g];
      const auto me = static_cast<std::size_t>(r);
      entered[me] = clock[me];
      last_comm[me] = e->op;
      const double end = group_start[g] + cost + group_extra[g];
      comm[me] += end - clock[me];
      clock[me] = end;
    }
  }
  finish_execution();
  out.setup_s = setup_end;
  out.cold_s = durations.front();
  out.warm_s = durations.back();
  out.comm_s = comm;
  out.compute_s = work;
  return out;
}

}  // namespace distmm

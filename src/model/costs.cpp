// The costs of collectives and of a first BLAS call (costs.hpp).
#include "model/costs.hpp"

#include <algorithm>
#include <cmath>

namespace distmm::model {
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

}  // namespace

double Costs::collective(OpKind op, int p, double total, int per_host) const {
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
double Costs::bw(double bytes) const {
  for (const LinkPiece& p : link.pieces) {
    if (bytes <= static_cast<double>(p.max_bytes)) return p.bandwidth_Bps;
  }
  return link.pieces.back().bandwidth_Bps;
}

// The library's packing buffers a first multiply of this shape touches first: they grow with
// the panels it packs. distmm's multiplies call BLAS as C^T = B^T A^T (BLAS's M = cols, N = rows, K
// = inner). OpenBLAS 0.3.21 (Debian's, Haswell kernels) packs a K-block of 256 of an M-block (512;
// an M under twice that in two halves; each thread its own) and of the whole N-panel (up to 65024:
// its buffer's size), in doubles. One thread with all of M in one block packs the N-panel a few
// columns (24) at a time into the same place, as nothing packed is used again (page faults of a
// first call, one thread: 16384 x 512 times 512 x 64 as distmm calls it, 59, where the whole panel
// is 6944; 2 threads 8248; one thread with M = 513, 8336).
double blas_packed_elements(double rows, double inner, double cols, int threads) {
  const double m = cols, n = rows, k = std::min(inner, 256.0);
  const double m_block = threads > 1 ? std::min(m, 512.0 * threads)
                         : m <= 512  ? m
                         : m < 1024  ? std::ceil(m / 8) * 4
                                     : 512;
  const double n_panel = threads == 1 && m <= 512 ? std::min(n, 24.0) : std::min(n, 65024.0);
  return k * (n_panel + m_block);
}

}  // namespace distmm::model

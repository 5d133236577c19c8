#pragma once
// What the time model charges for a collective on a link (by the algorithm Open MPI picks) and
// for a multiply's first call into BLAS: the pieces the replay (replay.cpp) costs events with.
#include <cstdint>

#include "distmm/model.hpp"

namespace distmm::model {

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
  double collective(OpKind op, int p, double total, int per_host) const;
  // The bandwidth of the piece serving messages of `bytes`.
  double bw(double bytes) const;
};

// Elements of the packing buffers a first BLAS call of this shape touches (costs.cpp says how
// OpenBLAS packs): the process's first multiply first touches them.
double blas_packed_elements(double rows, double inner, double cols, int threads);

// A measured curve's first-use figure per byte is carried beyond its largest point only
// when that point is this big.
inline constexpr std::uint64_t kReliableFirstUseBytes = 16u << 20;

}  // namespace distmm::model

#include "distmm/communicator.hpp"

#include <chrono>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "distmm/error.hpp"

namespace distmm {

const char* name_of(DataType t) {
  return t == DataType::f64 ? "double" : "float";
}

namespace {

std::uint64_t bytes(std::size_t count, DataType t) {
  return count * size_of(t);
}
std::uint64_t nonempty(std::size_t count) {
  return count > 0 ? 1 : 0;
}

// Sum and number of non-empty entries of counts, leaving out rank `skip`.
std::pair<std::size_t, std::uint64_t> others(std::span<const std::size_t> counts, int skip) {
  std::size_t sum = 0;
  std::uint64_t n = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (static_cast<int>(r) == skip) continue;
    sum += counts[r];
    n += nonempty(counts[r]);
  }
  return {sum, n};
}

std::size_t sum(std::span<const std::size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

// `factor` x (P-1)/P of `total` elements, in bytes: NCCL-tests' bus-bandwidth accounting.
double ring(std::size_t total, DataType t, int p, double factor) {
  if (p < 2) return 0.0;
  return factor * static_cast<double>(p - 1) / static_cast<double>(p) *
         static_cast<double>(bytes(total, t));
}

}  // namespace

Communicator::Volume Communicator::point_to_point(std::size_t count, DataType t, int peer,
                                                  bool sending) const {
  if (peer == rank()) return {};
  if (sending)
    return {bytes(count, t), 0, nonempty(count), 0, static_cast<double>(bytes(count, t))};
  return {0, bytes(count, t), 0, nonempty(count)};
}

// The mirror of a broadcast: every other rank's data reaches the root (NCCL's reduce moves
// 1x its size per rank, as a broadcast does).
Communicator::Volume Communicator::reduce_volume(std::size_t count, DataType t, int root) const {
  const auto others_n = static_cast<std::uint64_t>(size() - 1);
  const double wire = size() > 1 ? static_cast<double>(bytes(count, t)) : 0.0;
  if (rank() == root) {
    return {0, others_n * bytes(count, t), 0, others_n * nonempty(count), wire, bytes(count, t)};
  }
  return {bytes(count, t), 0, nonempty(count), 0, wire, bytes(count, t)};
}

Communicator::Volume Communicator::broadcast_volume(std::size_t count, DataType t, int root) const {
  const auto others_n = static_cast<std::uint64_t>(size() - 1);
  const double wire = size() > 1 ? static_cast<double>(bytes(count, t)) : 0.0;
  if (rank() == root) {
    return {others_n * bytes(count, t), 0, others_n * nonempty(count), 0, wire, bytes(count, t)};
  }
  return {0, bytes(count, t), 0, nonempty(count), wire, bytes(count, t)};
}

Communicator::Volume Communicator::scatterv_volume(std::span<const std::size_t> counts,
                                                   std::size_t mine, DataType t, int root,
                                                   std::size_t unit) const {
  // Only the root must pass the counts; the ring figure needs the total, so it is the root's.
  const std::uint64_t total = bytes(sum(counts) * unit, t);
  if (rank() == root) {
    const auto [rest, n] = others(counts, root);
    return {bytes(rest * unit, t),
            0,
            rest * unit > 0 ? n : 0,
            0,
            ring(sum(counts) * unit, t, size(), 1.0),
            total};
  }
  return {0, bytes(mine, t), 0, nonempty(mine), 0, total};
}

Communicator::Volume Communicator::columns(Volume v, RowMajor shape, DataType t,
                                           std::span<const std::size_t> counts, int root,
                                           bool root_in_place) const {
  v.row_bytes = shape.width * size_of(t);
  if (rank() == root && static_cast<std::size_t>(root) < counts.size()) {
    const auto [rest, n] = others(counts, root);
    const std::size_t own = root_in_place ? 0 : counts[static_cast<std::size_t>(root)];
    v.strided_bytes = bytes((rest + own) * shape.rows, t);
    v.strided_blocks = n + nonempty(own);
  }
  return v;
}

Communicator::Volume Communicator::gatherv_volume(std::span<const std::size_t> counts,
                                                  std::size_t mine, DataType t, int root,
                                                  std::size_t unit) const {
  const double wire = ring(sum(counts) * unit, t, size(), 1.0);
  const std::uint64_t total = bytes(sum(counts) * unit, t);
  if (rank() == root) {
    const auto [rest, n] = others(counts, root);
    return {0, bytes(rest * unit, t), 0, rest * unit > 0 ? n : 0, wire, total};
  }
  return {bytes(mine, t), 0, nonempty(mine), 0, wire, total};
}

Communicator::Volume Communicator::allgatherv_volume(std::span<const std::size_t> counts,
                                                     std::size_t mine, DataType t) const {
  const auto others_n = static_cast<std::uint64_t>(size() - 1);
  const auto [rest, n] = others(counts, rank());
  return {others_n * bytes(mine, t),         bytes(rest, t),       others_n * nonempty(mine), n,
          ring(sum(counts), t, size(), 1.0), bytes(sum(counts), t)};
}

Communicator::Volume Communicator::allreduce_volume(std::size_t count, DataType t) const {
  const auto others_n = static_cast<std::uint64_t>(size() - 1);
  return {others_n * bytes(count, t), others_n * bytes(count, t),  others_n * nonempty(count),
          others_n * nonempty(count), ring(count, t, size(), 2.0), bytes(count, t)};
}

Communicator::Volume Communicator::reduce_scatter_volume(std::span<const std::size_t> counts,
                                                         std::size_t mine, DataType t) const {
  const auto others_n = static_cast<std::uint64_t>(size() - 1);
  const auto [rest, n] = others(counts, rank());
  return {bytes(rest, t),
          others_n * bytes(mine, t),
          n,
          others_n * nonempty(mine),
          ring(sum(counts), t, size(), 1.0),
          bytes(sum(counts), t)};
}

void Communicator::inject(const FaultPlan& plan) {
  RankContext& c = *ctx_;
  c.fault = plan;
  c.fault_fired = false;
  c.fault_calls = 0;
  c.world_rank = world_ranks().at(static_cast<std::size_t>(rank()));
  c.delay_state = plan.seed * 1000003u + static_cast<std::uint64_t>(c.world_rank);
}

std::string Communicator::name() const {
  const std::vector<int> ranks = world_ranks();
  bool whole = true;
  for (std::size_t i = 0; i < ranks.size(); ++i) whole = whole && ranks[i] == static_cast<int>(i);
  // A communicator of every world rank in order is the world (or its duplicate).
  if (whole && parent_name_.empty()) return "world";
  std::ostringstream out;
  out << "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  out << " of " << (parent_name_.empty() ? "world" : parent_name_);
  return out.str();
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  check_color(color);
  std::unique_ptr<Communicator> child;
  counted(OpKind::split, -1, {}, [&] { child = do_split(color, key); });
  adopt(child.get());
  return child;
}

std::unique_ptr<Communicator> Communicator::split(const std::function<ColorKey(int)>& of) {
  check_color(of(rank()).color);
  std::unique_ptr<Communicator> child;
  counted(OpKind::split, -1, {}, [&] { child = do_split_known(of); });
  adopt(child.get());
  return child;
}

void Communicator::check_color(int color) const {
  if (color < 0 && color != kNoColor) {
    throw CommError("rank " + std::to_string(rank()) + ": split: color " + std::to_string(color) +
                        " is negative (use kNoColor to join no communicator)",
                    rank(), "split");
  }
}

void Communicator::adopt(Communicator* child) const {
  if (child == nullptr) return;
  child->ctx_ = ctx_;
  child->parent_name_ = name();
  child->comm_id_ = ctx_->stats.communicator_id(child->name(), child->world_ranks());
}

std::size_t Communicator::own_offset(std::span<const std::size_t> counts, int root,
                                     const char* op) const {
  const std::string what = std::string(op) + "(in place, root=" + std::to_string(root) + ")";
  if (rank() != root) {
    throw CommError(
        "rank " + std::to_string(rank()) + ": " + what + ": only the root may pass " + "in_place",
        rank(), what);
  }
  if (counts.size() != static_cast<std::size_t>(size())) {
    throw MismatchError("rank " + std::to_string(rank()) + ": " + what + ": " +
                            std::to_string(counts.size()) + " counts for " +
                            std::to_string(size()) + " ranks",
                        rank(), what);
  }
  return std::accumulate(counts.begin(), counts.begin() + rank(), std::size_t{0});
}

bool Communicator::before_call(OpKind op) {
  RankContext& c = *ctx_;
  const bool targeted = c.fault.rank == c.world_rank && !c.fault_fired;
  switch (c.fault.kind) {
    case FaultPlan::Kind::none:
      return true;
    case FaultPlan::Kind::crash: {
      if (!targeted || ++c.fault_calls < c.fault.call) return true;
      c.fault_fired = true;
      const std::string when = c.fault.call == 1
                                   ? std::string("its first communication")
                                   : "communication call " + std::to_string(c.fault.call);
      throw InjectedFault("rank " + std::to_string(c.world_rank) + ": injected fault " +
                              c.fault.spec + ": crashed at " + when + " (" +
                              std::string(name_of(op)) + ")",
                          rank(), std::string(name_of(op)));
    }
    case FaultPlan::Kind::skip:
      if (!targeted || op == OpKind::send || op == OpKind::recv || op == OpKind::sendrecv) {
        return true;
      }
      c.fault_fired = true;
      on_skipped_collective();
      return false;
    case FaultPlan::Kind::delay: {
      // A reproducible stream per rank: splitmix64 of the plan's seed.
      std::uint64_t z = (c.delay_state += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      const auto range = static_cast<std::uint64_t>(c.fault.delay_ms) * 1000 + 1;
      std::this_thread::sleep_for(std::chrono::microseconds(z % range));
      return true;
    }
  }
  return true;
}

}  // namespace distmm

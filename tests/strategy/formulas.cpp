#include "strategy/formulas.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "distmm/sharding.hpp"
#include "distmm/strategies/hsdp.hpp"

namespace distmm::testing {
namespace {

std::uint64_t nonempty(std::uint64_t n) {
  return n > 0 ? 1 : 0;
}

// Elements and messages rank 0 moves to (or from) the other ranks for per-rank counts.
struct RootTraffic {
  std::uint64_t elements = 0, messages = 0;
};
RootTraffic to_others(std::size_t total, int ranks, std::uint64_t unit) {
  RootTraffic t;
  for (int r = 1; r < ranks; ++r) {
    const std::uint64_t e = shard_of(total, ranks, r).count * unit;
    t.elements += e;
    t.messages += nonempty(e);
  }
  return t;
}

// Adds a row-scatter of an m x w matrix from rank 0 to `f` (elements, not yet bytes).
void row_scatter(RankFigures& f, std::size_t rows, std::uint64_t width, int ranks) {
  if (f.rank == 0) {
    const RootTraffic t = to_others(rows, ranks, width);
    f.bytes_sent += t.elements;
    f.messages_sent += t.messages;
  } else {
    const std::uint64_t e = shard_of(rows, ranks, f.rank).count * width;
    f.bytes_received += e;
    f.messages_received += nonempty(e);
  }
}

void row_gather(RankFigures& f, std::size_t rows, std::uint64_t width, int ranks) {
  if (f.rank == 0) {
    const RootTraffic t = to_others(rows, ranks, width);
    f.bytes_received += t.elements;
    f.messages_received += t.messages;
  } else {
    const std::uint64_t e = shard_of(rows, ranks, f.rank).count * width;
    f.bytes_sent += e;
    f.messages_sent += nonempty(e);
  }
}

}  // namespace

namespace {

// The grid strategy's grid for a run that gives none (--grid auto).
Grid auto_grid(const Strategy& s, const MatmulShape& shape, int ranks, std::size_t element_bytes) {
  const StrategySettings settled = s.settle({}, RunPlacement{ranks, 1, shape, element_bytes});
  return parse_grid(*settled.find("grid"), ranks);
}

}  // namespace

RankFigures expected_figures(const Strategy& strategy, const MatmulShape& shape, int ranks,
                             int rank, std::size_t element_bytes, int replicas) {
  if (strategy.name() == "grid") {
    return expected_grid_figures(auto_grid(strategy, shape, ranks, element_bytes), shape, ranks,
                                 rank, element_bytes);
  }
  RankFigures f;
  f.rank = rank;
  f.a_rows = shard_of(shape.m, ranks, rank).count;
  const std::uint64_t k = shape.k, n = shape.n, full_b = k * n;
  const auto others = static_cast<std::uint64_t>(ranks - 1);
  std::uint64_t persistent = full_b, peak = full_b;
  const bool tensor_parallel = strategy.name() == "tp-col" || strategy.name() == "tp-row";
  if (tensor_parallel) {
    // Every rank multiplies all of A's rows (by its columns of B, or its columns of A by its
    // rows of B).
    f.a_rows = shape.m;
    const std::uint64_t m = shape.m;
    if (strategy.name() == "tp-col") {
      persistent = peak = shard_of(n, ranks, rank).count * k;
      if (ranks > 1) {
        row_scatter(f, n, k, ranks);  // setup: B's columns
        if (rank == 0) {              // A broadcast
          f.bytes_sent += others * m * k;
          f.messages_sent += others * nonempty(m * k);
        } else {
          f.bytes_received += m * k;
          f.messages_received += nonempty(m * k);
        }
        row_gather(f, n, m, ranks);  // C's columns
      }
    } else {
      persistent = peak = shard_of(k, ranks, rank).count * n;
      if (ranks > 1) {
        row_scatter(f, k, n, ranks);  // setup: B's rows
        row_scatter(f, k, m, ranks);  // A's columns
        if (rank == 0) {              // the partial products summed to the root
          f.bytes_received += others * m * n;
          f.messages_received += others * nonempty(m * n);
        } else {
          f.bytes_sent += m * n;
          f.messages_sent += nonempty(m * n);
        }
      }
    }
  } else if (ranks > 1) {
    row_scatter(f, shape.m, k, ranks);
    const std::string_view name = strategy.name();
    if (name == "dp") {
      if (rank == 0) {
        f.bytes_sent += others * full_b;
        f.messages_sent += others * nonempty(full_b);
      } else {
        f.bytes_received += full_b;
        f.messages_received += nonempty(full_b);
      }
    } else if (name == "fsdp") {
      const std::uint64_t mine = shard_of(n, ranks, rank).count * k;
      row_scatter(f, n, k, ranks);  // the parameter shards: columns of B
      f.bytes_sent += others * mine;
      f.messages_sent += others * nonempty(mine);
      f.bytes_received += full_b - mine;
      for (int r = 0; r < ranks; ++r) {
        if (r != rank) f.messages_received += nonempty(shard_of(n, ranks, r).count * k);
      }
      persistent = mine;
      peak = mine + full_b;
    } else if (name == "fsdp-overlap") {
      row_scatter(f, n, k, ranks);  // the parameter shards, as in FSDP
      // P - 1 ring steps: at step t rank r passes on the shard of rank (r - t) mod P and
      // receives that of rank (r - t - 1) mod P.
      const auto shard_elements = [&](int owner) -> std::uint64_t {
        return shard_of(n, ranks, (owner % ranks + ranks) % ranks).count * k;
      };
      for (int t = 0; t + 1 < ranks; ++t) {
        const std::uint64_t out = shard_elements(rank - t), in = shard_elements(rank - t - 1);
        f.bytes_sent += out;
        f.messages_sent += nonempty(out);
        f.bytes_received += in;
        f.messages_received += nonempty(in);
      }
      persistent = shard_elements(rank);
      peak = persistent + static_cast<std::uint64_t>(std::min(ranks - 1, 2)) * shard_elements(0);
    } else if (name == "hsdp") {
      const Mesh mesh = make_mesh(ranks, replicas);
      const int s = mesh.group_size, i = mesh.index_of(rank), g = mesh.group_of(rank);
      const auto shard = [&](int index) { return shard_of(n, s, index).count * k; };
      const std::uint64_t mine = shard(i);
      // Setup: the root's group (group 0) scatters B's shards from the root (index 0) ...
      if (g == 0 && s > 1) {
        if (i == 0) {
          for (int j = 1; j < s; ++j) {
            f.bytes_sent += shard(j);
            f.messages_sent += nonempty(shard(j));
          }
        } else {
          f.bytes_received += mine;
          f.messages_received += nonempty(mine);
        }
      }
      // ... and each shard is broadcast from group 0 to its R - 1 replicas.
      const auto others_r = static_cast<std::uint64_t>(mesh.replicas - 1);
      if (g == 0) {
        f.bytes_sent += others_r * mine;
        f.messages_sent += others_r * nonempty(mine);
      } else {
        f.bytes_received += mine;
        f.messages_received += nonempty(mine);
      }
      // Each execution all-gathers B within the group.
      const auto others_s = static_cast<std::uint64_t>(s - 1);
      f.bytes_sent += others_s * mine;
      f.messages_sent += others_s * nonempty(mine);
      f.bytes_received += full_b - mine;
      for (int j = 0; j < s; ++j) {
        if (j != i) f.messages_received += nonempty(shard(j));
      }
      persistent = mine;
      peak = mine + (s > 1 ? full_b : 0);
    }
    row_gather(f, shape.m, n, ranks);
  }
  f.param_elements = persistent;
  f.bytes_sent *= element_bytes;
  f.bytes_received *= element_bytes;
  f.persistent_param_bytes = persistent * element_bytes;
  f.peak_param_bytes = peak * element_bytes;
  return f;
}

std::uint64_t expected_parameter_bytes(const Strategy& s, const MatmulShape& shape, int ranks,
                                       int rank, std::size_t element_bytes, int replicas);

std::uint64_t expected_multiplies(const Strategy& strategy, const MatmulShape& shape, int ranks,
                                  int rank) {
  if (strategy.name() == "fsdp-overlap") return static_cast<std::uint64_t>(ranks);
  if (strategy.name() == "grid") {
    return expected_grid_multiplies(auto_grid(strategy, shape, ranks, sizeof(double)), shape, rank);
  }
  return 1;
}

namespace {

// The elements of each buffer a plan allocates on `rank` (not B or its shard), in the order it
// allocates them.
std::vector<std::uint64_t> plan_buffers(const Strategy& s, const MatmulShape& shape, int ranks,
                                        int rank, int root, int replicas) {
  const std::uint64_t k = shape.k, n = shape.n;
  const std::uint64_t m = shape.m, rows = shard_of(shape.m, ranks, rank).count;
  const std::uint64_t columns = shard_of(shape.n, ranks, rank).count;
  const bool buffers = rank != root && ranks > 1;  // the root works in A and C themselves
  std::vector<std::uint64_t> out;
  if (s.name() == "tp-col") {  // A and C's columns of the shard
    if (buffers) out = {k * m, m * columns};
    return out;
  }
  if (s.name() == "tp-row") {  // A's columns and the partial C
    if (buffers) out = {m * shard_of(shape.k, ranks, rank).count, n * m};
    return out;
  }
  if (buffers) out = {k * rows, n * rows};                    // A_r, C_r
  if (s.name() == "fsdp" && ranks > 1) out.push_back(k * n);  // the gather buffer
  if (s.name() == "fsdp-overlap") {
    const int ring = ranks > 2 ? 2 : (ranks == 2 ? 1 : 0);
    for (int i = 0; i < ring; ++i) out.push_back(k * shard_of(shape.n, ranks, 0).count);
  }
  if (s.name() == "hsdp" && make_mesh(ranks, replicas).group_size > 1) out.push_back(k * n);
  return out;
}

}  // namespace

std::uint64_t expected_allocation(const Strategy& s, const MatmulShape& shape, int ranks, int rank,
                                  std::size_t element_bytes, int root, int replicas) {
  if (s.name() == "grid") {
    return expected_grid_allocation(auto_grid(s, shape, ranks, element_bytes), shape, rank,
                                    element_bytes);
  }
  const std::vector<std::uint64_t> buffers = plan_buffers(s, shape, ranks, rank, root, replicas);
  return expected_parameter_bytes(s, shape, ranks, rank, element_bytes, replicas) +
         std::accumulate(buffers.begin(), buffers.end(), std::uint64_t{0}) * element_bytes;
}

std::uint64_t expected_parameter_bytes(const Strategy& s, const MatmulShape& shape, int ranks,
                                       int rank, std::size_t element_bytes, int replicas) {
  const std::uint64_t k = shape.k, n = shape.n;
  const std::uint64_t columns = shard_of(shape.n, ranks, rank).count;
  const std::string_view name = s.name();
  if (name == "dp") return k * n * element_bytes;
  if (name == "fsdp" || name == "fsdp-overlap" || name == "tp-col") {
    return k * columns * element_bytes;
  }
  if (name == "hsdp") {
    const Mesh mesh = make_mesh(ranks, replicas);
    return k * shard_of(shape.n, mesh.group_size, mesh.index_of(rank)).count * element_bytes;
  }
  if (name == "tp-row") return n * shard_of(shape.k, ranks, rank).count * element_bytes;
  return 0;
}

// The README's per-step training figures.
TrainStepFigures expected_train_figures(const Strategy& strategy, const MatmulShape& shape,
                                        int ranks, int rank, std::size_t element_bytes,
                                        Optimizer optimizer, int replicas) {
  const std::uint64_t psi = static_cast<std::uint64_t>(shape.k) * shape.n * element_bytes;
  const std::uint64_t others = static_cast<std::uint64_t>(ranks - 1);
  constexpr std::uint64_t kLoss = sizeof(double);
  TrainStepFigures f;
  const std::size_t state = optimizer_state_per_parameter(optimizer);
  if (strategy.name() == "dp" || ranks == 1) {
    // All-reduce of the gradient and of the loss; W and its gradient replicated.
    f.bytes_sent = f.bytes_received = ranks == 1 ? 0 : others * (psi + kLoss);
    f.persistent_param_grad_bytes = f.peak_param_grad_bytes = 2 * psi;
    f.optimizer_state_bytes = state * psi;
    return f;
  }
  if (strategy.name() == "tp-col") {
    // The input gradient's all-reduce (m x k) and the loss's; W and its gradient sharded.
    const std::uint64_t dx = static_cast<std::uint64_t>(shape.m) * shape.k * element_bytes;
    const std::uint64_t own =
        static_cast<std::uint64_t>(shape.k) * shard_of(shape.n, ranks, rank).count * element_bytes;
    f.bytes_sent = f.bytes_received = others * (dx + kLoss);
    f.persistent_param_grad_bytes = f.peak_param_grad_bytes = 2 * own;
    f.optimizer_state_bytes = state * own;
    return f;
  }
  if (strategy.name() == "hsdp") {
    // FSDP within the shard group of S, then the shard's all-reduce across the R replicas.
    const int s = ranks / replicas;  // the mesh: R groups of S
    const std::uint64_t own =
        static_cast<std::uint64_t>(shape.k) * shard_of(shape.n, s, rank % s).count * element_bytes;
    const auto others_s = static_cast<std::uint64_t>(s - 1);
    const auto others_r = static_cast<std::uint64_t>(replicas - 1);
    const std::uint64_t scatter_sent = s > 1 ? psi - own : 0, scatter_received = others_s * own;
    f.bytes_sent = 2 * others_s * own + scatter_sent + others_r * own + others * kLoss;
    f.bytes_received = 2 * (psi - own) + scatter_received + others_r * own + others * kLoss;
    f.persistent_param_grad_bytes = 2 * own;
    f.peak_param_grad_bytes = 2 * own + (s > 1 ? psi : 0);
    f.optimizer_state_bytes = state * own;
    return f;
  }
  // FSDP: two all-gathers of W, a reduce-scatter of the gradient, the loss's all-reduce.
  const std::uint64_t own =
      static_cast<std::uint64_t>(shape.k) * shard_of(shape.n, ranks, rank).count * element_bytes;
  f.bytes_sent = 2 * others * own + (psi - own) + others * kLoss;
  f.bytes_received = 2 * (psi - own) + others * own + others * kLoss;
  f.persistent_param_grad_bytes = 2 * own;
  f.peak_param_grad_bytes = 2 * own + psi;
  f.optimizer_state_bytes = state * own;
  return f;
}

// The columns of W a rank saves: its shard (fsdp, tp-col), its share of the replica (dp), its
// part of its group's shard (hsdp: the R replicas of a shard split it).
Shard expected_checkpoint_columns(const Strategy& strategy, const MatmulShape& shape, int ranks,
                                  int rank, int replicas) {
  if (strategy.name() == "hsdp" && ranks > 1) {
    const int s = ranks / replicas;
    const Shard shard = shard_of(shape.n, s, rank % s);
    const Shard part = shard_of(shard.count, replicas, rank / s);
    return {shard.offset + part.offset, part.count};
  }
  return shard_of(shape.n, ranks, rank);
}

}  // namespace distmm::testing

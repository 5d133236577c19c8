// The grid's formulas (grid.hpp's header comment), written from the decomposition alone: which
// blocks each rank holds, and what every step of setup and one execution moves.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "distmm/sharding.hpp"
#include "strategy/formulas.hpp"

namespace distmm::testing {
namespace {

struct Place {
  int i, j, l;
};
Place place(const Grid& g, int r) {
  return {r % (g.pm * g.pn) / g.pn, r % g.pn, r / (g.pm * g.pn)};
}

std::uint64_t nonzero(std::uint64_t x) {
  return x > 0 ? 1 : 0;
}

// A collective from rank 0 (or to it) over all the ranks where rank r moves want(r) elements:
// rank 0 sends (receives) every other rank's, one message each that is not empty.
void from_root(RankFigures& f, int ranks, const std::vector<std::uint64_t>& want, bool to_root) {
  std::uint64_t& root_bytes = to_root ? f.bytes_received : f.bytes_sent;
  std::uint64_t& root_msgs = to_root ? f.messages_received : f.messages_sent;
  std::uint64_t& bytes = to_root ? f.bytes_sent : f.bytes_received;
  std::uint64_t& msgs = to_root ? f.messages_sent : f.messages_received;
  if (f.rank == 0) {
    for (int r = 1; r < ranks; ++r) {
      root_bytes += want[static_cast<std::size_t>(r)];
      root_msgs += nonzero(want[static_cast<std::size_t>(r)]);
    }
  } else {
    bytes += want[static_cast<std::size_t>(f.rank)];
    msgs += nonzero(want[static_cast<std::size_t>(f.rank)]);
  }
}

// A broadcast of `count` elements in a group of `members` from `owner`: the owner sends it to
// each other member, the others receive it.
void broadcast(RankFigures& f, bool owner, int members, std::uint64_t count) {
  if (members < 2 || count == 0) return;
  if (owner) {
    f.bytes_sent += static_cast<std::uint64_t>(members - 1) * count;
    f.messages_sent += static_cast<std::uint64_t>(members - 1);
  } else {
    f.bytes_received += count;
    f.messages_received += 1;
  }
}

// A reduce of `count` elements in a group of `members` onto `owner`: each other member sends
// it, the owner receives one from each.
void reduce(RankFigures& f, bool owner, int members, std::uint64_t count) {
  if (members < 2 || count == 0) return;
  if (owner) {
    f.bytes_received += static_cast<std::uint64_t>(members - 1) * count;
    f.messages_received += static_cast<std::uint64_t>(members - 1);
  } else {
    f.bytes_sent += count;
    f.messages_sent += 1;
  }
}

// Layer `l`'s panels: [start, end) of the layer's inner dimension, cut at both owners'
// boundaries and every `panel` columns.
std::vector<std::pair<std::size_t, std::size_t>> panels(const Grid& g, std::size_t layer,
                                                        std::size_t panel) {
  std::vector<std::size_t> cuts;
  for (const int parts : {g.pn, g.pm}) {  // the first layer % parts parts one longer
    const std::size_t base = layer / static_cast<std::size_t>(parts);
    const std::size_t extra = layer % static_cast<std::size_t>(parts);
    std::size_t at = 0;
    for (std::size_t x = 0; x < static_cast<std::size_t>(parts); ++x) {
      cuts.push_back(at);
      at += base + (x < extra ? 1 : 0);
    }
  }
  cuts.push_back(layer);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    for (std::size_t s = cuts[c]; s < cuts[c + 1]; s += panel) {
      out.push_back({s, std::min(s + panel, cuts[c + 1])});
    }
  }
  return out;
}

// The grid row (column) member whose part of the layer holds inner index `at`.
int owner(std::size_t layer, int parts, std::size_t at) {
  for (int x = 0; x < parts; ++x) {
    const Shard s = shard_of(layer, parts, x);
    if (at >= s.offset && at < s.offset + s.count) return x;
  }
  return -1;
}

}  // namespace

RankFigures expected_grid_figures(const Grid& g, const MatmulShape& shape, int ranks, int rank,
                                  std::size_t element_bytes, std::size_t panel) {
  RankFigures f;
  f.rank = rank;
  const auto layer = [&](int l) { return shard_of(shape.k, g.pk, l).count; };
  const auto rows = [&](int i) { return shard_of(shape.m, g.pm, i).count; };
  const auto cols = [&](int j) { return shard_of(shape.n, g.pn, j).count; };
  const auto n_of = static_cast<std::size_t>(ranks);
  // Setup: B's block column j, its ranks' rows (of their layer, split over the grid rows).
  for (int j = 0; j < g.pn; ++j) {
    std::vector<std::uint64_t> want(n_of, 0);
    for (int r = 0; r < g.used(); ++r) {
      const Place p = place(g, r);
      if (p.j == j)
        want[static_cast<std::size_t>(r)] = cols(j) * shard_of(layer(p.l), g.pm, p.i).count;
    }
    from_root(f, ranks, want, false);
  }
  // A's block row i, its ranks' columns (of their layer, split over the grid columns).
  for (int i = 0; i < g.pm; ++i) {
    std::vector<std::uint64_t> want(n_of, 0);
    for (int r = 0; r < g.used(); ++r) {
      const Place p = place(g, r);
      if (p.i == i)
        want[static_cast<std::size_t>(r)] = rows(i) * shard_of(layer(p.l), g.pn, p.j).count;
    }
    from_root(f, ranks, want, false);
  }
  std::uint64_t persistent = 0, panel_params = 0;
  if (rank < g.used()) {
    const Place me = place(g, rank);
    const std::uint64_t mi = rows(me.i), nj = cols(me.j);
    const auto mine = panels(g, layer(me.l), panel);
    std::size_t widest = 0;
    for (const auto& [s, e] : mine) {
      widest = std::max(widest, e - s);
      broadcast(f, owner(layer(me.l), g.pn, s) == me.j, g.pn, mi * (e - s));
      broadcast(f, owner(layer(me.l), g.pm, s) == me.i, g.pm, nj * (e - s));
    }
    if (!mine.empty()) f.a_rows = mi;
    // The layers' sums onto layer 0.
    if (g.pk > 1 && mi * nj > 0) {
      if (me.l == 0) {
        f.bytes_received += static_cast<std::uint64_t>(g.pk - 1) * mi * nj;
        f.messages_received += static_cast<std::uint64_t>(g.pk - 1);
      } else {
        f.bytes_sent += mi * nj;
        f.messages_sent += 1;
      }
    }
    persistent = nj * shard_of(layer(me.l), g.pm, me.i).count;
    if (g.pm > 1) panel_params = std::min<std::size_t>(2, mine.size()) * nj * widest;
  }
  // C's block row i from layer 0's ranks of it.
  for (int i = 0; i < g.pm; ++i) {
    std::vector<std::uint64_t> want(n_of, 0);
    for (int j = 0; j < g.pn; ++j)
      want[static_cast<std::size_t>(g.rank_at(i, j, 0))] = rows(i) * cols(j);
    from_root(f, ranks, want, true);
  }
  f.param_elements = persistent;
  f.bytes_sent *= element_bytes;
  f.bytes_received *= element_bytes;
  f.persistent_param_bytes = persistent * element_bytes;
  f.peak_param_bytes = (persistent + panel_params) * element_bytes;
  return f;
}

// Per training step (grid_train.cpp's header): the forward's broadcasts of every panel, the
// same again in the backward with the gradient's panel reduced along the grid column and the
// input gradient's along the grid row, and the loss's all-reduce over every rank.
TrainStepFigures expected_grid_train_figures(const Grid& g, const MatmulShape& shape, int ranks,
                                             int rank, std::size_t element_bytes,
                                             Optimizer optimizer, std::size_t panel) {
  RankFigures f;
  std::uint64_t own = 0, panel_params = 0;
  if (rank < g.used()) {
    const Place me = place(g, rank);
    const std::uint64_t mi = shard_of(shape.m, g.pm, me.i).count;
    const std::uint64_t nj = shard_of(shape.n, g.pn, me.j).count;
    const auto mine = panels(g, shape.k, panel);
    std::size_t widest = 0;
    for (const auto& [s, e] : mine) {
      widest = std::max(widest, e - s);
      const bool a_owner = owner(shape.k, g.pn, s) == me.j;
      const bool b_owner = owner(shape.k, g.pm, s) == me.i;
      for (int pass = 0; pass < 2; ++pass) {
        broadcast(f, a_owner, g.pn, mi * (e - s));
        broadcast(f, b_owner, g.pm, nj * (e - s));
      }
      reduce(f, b_owner, g.pm, nj * (e - s));
      reduce(f, a_owner, g.pn, mi * (e - s));
    }
    own = nj * shard_of(shape.k, g.pm, me.i).count;
    if (g.pm > 1) panel_params = std::min<std::size_t>(2, mine.size()) * nj * widest;
  }
  const std::uint64_t loss = static_cast<std::uint64_t>(ranks - 1) * sizeof(double);
  TrainStepFigures out;
  out.bytes_sent = f.bytes_sent * element_bytes + loss;
  out.bytes_received = f.bytes_received * element_bytes + loss;
  out.persistent_param_grad_bytes = 2 * own * element_bytes;
  out.peak_param_grad_bytes = (2 * own + panel_params) * element_bytes;
  out.optimizer_state_bytes = optimizer_state_per_parameter(optimizer) * own * element_bytes;
  return out;
}

Block expected_grid_checkpoint_block(const Grid& g, const MatmulShape& shape, int rank) {
  if (rank >= g.used()) return {};
  const Place me = place(g, rank);
  const Shard rows = shard_of(shape.k, g.pm, me.i), cols = shard_of(shape.n, g.pn, me.j);
  return {rows.offset, rows.count, cols.offset, cols.count};
}

std::uint64_t expected_grid_multiplies(const Grid& g, const MatmulShape& shape, int rank,
                                       std::size_t panel) {
  if (rank >= g.used()) return 0;
  return panels(g, shard_of(shape.k, g.pk, place(g, rank).l).count, panel).size();
}

std::uint64_t expected_grid_allocation(const Grid& g, const MatmulShape& shape, int rank,
                                       std::size_t element_bytes, std::size_t panel) {
  if (rank >= g.used()) return 0;
  const Place me = place(g, rank);
  const std::uint64_t mi = shard_of(shape.m, g.pm, me.i).count;
  const std::uint64_t nj = shard_of(shape.n, g.pn, me.j).count;
  const std::size_t layer = shard_of(shape.k, g.pk, me.l).count;
  const auto mine = panels(g, layer, panel);
  std::size_t widest = 0;
  for (const auto& [s, e] : mine) widest = std::max(widest, e - s);
  const std::uint64_t slots = std::min<std::size_t>(2, mine.size());
  const std::uint64_t elements = nj * shard_of(layer, g.pm, me.i).count +  // B's part
                                 mi * shard_of(layer, g.pn, me.j).count +  // A's part
                                 mi * nj +                                 // the C block
                                 slots * widest * ((g.pn > 1 ? mi : 0) + (g.pm > 1 ? nj : 0));
  return elements * element_bytes;
}

}  // namespace distmm::testing

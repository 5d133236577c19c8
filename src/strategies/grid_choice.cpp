// The grid's arithmetic: its text, what a grid moves and holds, --grid auto.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "distmm/error.hpp"
#include "distmm/strategies/grid.hpp"

namespace distmm {

std::string grid_text(const Grid& g) {
  return std::to_string(g.pm) + "x" + std::to_string(g.pn) + "x" + std::to_string(g.pk);
}

Grid parse_grid(std::string_view text, int ranks) {
  const auto bad = [&](const std::string& why) {
    return InputError("--grid " + escaped(text) + ": " + why, -1, "--grid");
  };
  int sides[3] = {1, 1, 1};
  std::size_t count = 0, at = 0;
  while (true) {
    const std::size_t x = text.find('x', at);
    const std::string_view piece = text.substr(at, x == std::string_view::npos ? x : x - at);
    int v = 0;
    const auto [end, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), v);
    if (count == 3 || piece.empty() || ec != std::errc() || end != piece.data() + piece.size()) {
      throw bad("expected PMxPNxPK (three whole numbers, as 2x2x1) or auto");
    }
    if (v < 1) throw bad("each side must be at least 1");
    sides[count++] = v;
    if (x == std::string_view::npos) break;
    at = x + 1;
  }
  if (count < 2) throw bad("expected PMxPNxPK (three whole numbers, as 2x2x1) or auto");
  const Grid g{sides[0], sides[1], sides[2]};
  if (static_cast<long long>(g.pm) * g.pn * g.pk > ranks) {
    throw bad("needs " + std::to_string(static_cast<long long>(g.pm) * g.pn * g.pk) +
              " ranks, the run has " + std::to_string(ranks));
  }
  return g;
}

GridCost grid_cost(const Grid& g, const MatmulShape& shape, std::size_t panel, bool distributed) {
  // The largest blocks (the first ones), and the smallest parts of A's and B's a rank owns.
  const std::size_t rows = shard_of(shape.m, g.pm, 0).count;
  const double mi = static_cast<double>(rows);
  const double nj = static_cast<double>(shard_of(shape.n, g.pn, 0).count);
  const std::size_t layer = shard_of(shape.k, g.pk, 0).count;
  const double kl = static_cast<double>(layer);
  const double a_own = static_cast<double>(shard_of(layer, g.pn, g.pn - 1).count);
  const double b_own = static_cast<double>(shard_of(layer, g.pm, g.pm - 1).count);
  const double c_rows = static_cast<double>(shard_of(rows, g.pk, 0).count);
  GridCost cost;
  if (distributed) {
    // The panels it does not own, and its rows of C_ij from every other layer.
    cost.words = mi * (kl - a_own) + nj * (kl - b_own) + (g.pk - 1) * c_rows * nj;
  } else {
    // A's part arrives from the root, then the rest of its panels; layer 0 receives the other
    // layers' blocks (the reduce's logical volume).
    cost.words = mi * kl + nj * (kl - b_own) + (g.pk - 1) * mi * nj;
  }
  const double w = static_cast<double>(std::min(panel, layer));
  // Distributed with layers: the partial C_ij besides the rank's rows of C.
  const double c_held = distributed && g.pk > 1 ? mi * nj + c_rows * nj : mi * nj;
  cost.held_elements = mi * static_cast<double>(shard_of(layer, g.pn, 0).count) +
                       nj * static_cast<double>(shard_of(layer, g.pm, 0).count) + c_held +
                       2 * w * ((g.pn > 1 ? mi : 0) + (g.pm > 1 ? nj : 0));
  return cost;
}

GridChoice choose_grid(const MatmulShape& shape, int ranks, std::size_t element_bytes,
                       double memory_per_rank, std::size_t panel, bool distributed,
                       int most_layers) {
  const int fewest = std::max(1, static_cast<int>(std::ceil(0.95 * ranks)));
  const auto within = [](int side, std::size_t dim) {
    return side == 1 || static_cast<std::size_t>(side) <= dim;
  };
  GridChoice best, smallest;
  bool any = false, any_at_all = false;
  for (int pm = 1; pm <= ranks; ++pm) {
    if (!within(pm, shape.m)) break;
    for (int pn = 1; pm * pn <= ranks; ++pn) {
      if (!within(pn, shape.n)) break;
      const int layers =
          most_layers > 0 ? std::min(most_layers, ranks / (pm * pn)) : ranks / (pm * pn);
      for (int pk = std::max(1, (fewest + pm * pn - 1) / (pm * pn)); pk <= layers; ++pk) {
        if (!within(pk, shape.k)) break;
        const Grid g{pm, pn, pk};
        const GridCost c = grid_cost(g, shape, panel, distributed);
        const double bytes = c.held_elements * static_cast<double>(element_bytes);
        if (!any_at_all || c.held_elements < smallest.cost.held_elements) {
          smallest = {g, c, false};
          any_at_all = true;
        }
        if (memory_per_rank > 0 && bytes > memory_per_rank) continue;
        const bool better =
            !any || c.words < best.cost.words * (1 - 1e-12) ||
            (c.words <= best.cost.words * (1 + 1e-12) &&
             (g.used() > best.grid.used() ||
              (g.used() == best.grid.used() && c.held_elements < best.cost.held_elements)));
        if (better) {
          best = {g, c, true};
          any = true;
        }
      }
    }
  }
  return any ? best : smallest;
}

}  // namespace distmm

#include "distmm/layout.hpp"

#include <vector>

#include "distmm/report.hpp"

namespace distmm {
namespace {

// SplitMix64's finalizer: a bijection of 64-bit words whose outputs pass BigCrush.
std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

double random_entry(std::uint64_t seed, int which, std::size_t row, std::size_t col) {
  const std::uint64_t key = mix(mix(seed * 2 + static_cast<std::uint64_t>(which)) ^ row) ^ col;
  return static_cast<double>(mix(key) >> 11) * 0x1.0p-52 - 1.0;
}

template <Element T>
arma::Mat<T> assemble_blocks(Communicator& comm, const Block& mine, const arma::Mat<T>& mine_t,
                             std::size_t rows, std::size_t cols, int root) {
  const auto blocks =
      gather_values(comm,
                    {static_cast<double>(mine.row0), static_cast<double>(mine.rows),
                     static_cast<double>(mine.col0), static_cast<double>(mine.cols)},
                    root);
  constexpr int kTag = 71;
  if (comm.rank() != root) {
    if (mine.elements() > 0) comm.send(mine_t, root, kTag);
    return {};
  }
  arma::Mat<T> whole(rows, cols, arma::fill::zeros);
  for (int q = 0; q < comm.size(); ++q) {
    const auto& v = blocks[static_cast<std::size_t>(q)];
    const auto at = [&](std::size_t i) { return static_cast<std::size_t>(v[i]); };
    if (at(1) * at(3) == 0) continue;
    arma::Mat<T> part_t(at(3), at(1));
    if (q == root) {
      part_t = mine_t;
    } else {
      comm.recv(part_t, q, kTag);
    }
    whole.submat(at(0), at(2), arma::size(at(1), at(3))) = part_t.t();
  }
  return whole;
}

template arma::Mat<double> assemble_blocks(Communicator&, const Block&, const arma::Mat<double>&,
                                           std::size_t, std::size_t, int);
template arma::Mat<float> assemble_blocks(Communicator&, const Block&, const arma::Mat<float>&,
                                          std::size_t, std::size_t, int);

}  // namespace distmm

#pragma once
// The copy between a block of columns of a row-major matrix and a column-major block: how
// scatterv_columns and gatherv_columns pack and unpack on both backends (calibrate times it).
#include <algorithm>
#include <cstddef>

#include "distmm/communicator.hpp"

namespace distmm {

// Columns [first, first + count / rows) of a row-major matrix into a column-major block of
// `count` elements, and back: a transpose, by tiles of 16 rows x 64 columns with the inner
// loop writing consecutive elements. Moving pieces of about 256 KiB both ways on 11 shapes
// (130 x 600 to 8192 x 512, power-of-two widths among them), geometric mean of two runs:
// 7.7-8.0 GB/s by these tiles, 5.7-5.8 by 64 x 64 (a power-of-two width puts a tall tile's
// rows in the same cache sets); bench/results/columns-20261208/tiles.cpp.
template <typename T>
inline void columns_between(RowMajor m, std::size_t first, std::size_t count, const T* from, T* to,
                            bool to_block) {
  if (m.rows == 0) return;
  constexpr std::size_t kTileRows = 16, kTileColumns = 64;
  const std::size_t cols = count / m.rows;
  for (std::size_t c0 = 0; c0 < cols; c0 += kTileColumns) {
    const std::size_t c1 = std::min(cols, c0 + kTileColumns);
    for (std::size_t i0 = 0; i0 < m.rows; i0 += kTileRows) {
      const std::size_t i1 = std::min(m.rows, i0 + kTileRows);
      if (to_block) {
        for (std::size_t c = c0; c < c1; ++c) {
          for (std::size_t i = i0; i < i1; ++i) to[c * m.rows + i] = from[i * m.width + first + c];
        }
      } else {
        for (std::size_t i = i0; i < i1; ++i) {
          for (std::size_t c = c0; c < c1; ++c) to[i * m.width + first + c] = from[c * m.rows + i];
        }
      }
    }
  }
}

// The same for buffers of either element type: `from` is the matrix and `to` the block when
// to_block, the other way round otherwise.
inline void columns_between(DataType t, RowMajor m, std::size_t first, std::size_t count,
                            const void* from, void* to, bool to_block) {
  if (t == DataType::f64) {
    columns_between(m, first, count, static_cast<const double*>(from), static_cast<double*>(to),
                    to_block);
  } else {
    columns_between(m, first, count, static_cast<const float*>(from), static_cast<float*>(to),
                    to_block);
  }
}

}  // namespace distmm

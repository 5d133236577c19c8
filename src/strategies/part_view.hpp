#pragma once
// Views of parts of a buffer, for collectives and multiplies on blocks of a larger matrix.
#include <armadillo>
#include <cstddef>

#include "distmm/communicator.hpp"

namespace distmm {

// `base` + `offset`, or null where there is no memory behind the matrix (a dry run): no
// arithmetic on a null pointer.
template <Element T>
T* at_offset(const T* base, std::size_t offset) {
  return base == nullptr ? nullptr : const_cast<T*>(base) + offset;
}

// A view of `count` elements at `base` + `offset` (no copy, no allocation); in a dry run one
// of that size with no memory either.
template <Element T>
arma::Mat<T> part(const T* base, std::size_t offset, std::size_t count) {
  return arma::Mat<T>(at_offset(base, offset), count, 1, false, true);
}

}  // namespace distmm

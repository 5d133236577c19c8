#pragma once
#include <cstddef>
#include <ostream>

namespace distmm {

// The shape of C = A @ B: A is m x k, B is k x n, C is m x n.
struct MatmulShape {
  std::size_t m = 0;
  std::size_t k = 0;
  std::size_t n = 0;
  bool operator==(const MatmulShape&) const = default;
  // Floating-point operations of the multiply: 2 m k n.
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  }
};

inline std::ostream& operator<<(std::ostream& out, const MatmulShape& s) {
  return out << s.m << "x" << s.k << " @ " << s.k << "x" << s.n;
}

}  // namespace distmm

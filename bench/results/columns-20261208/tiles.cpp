#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>
template <std::size_t TR, std::size_t TC>
void between(std::size_t rows, std::size_t width, std::size_t first, std::size_t cols,
             const double* from, double* to, bool to_block) {
  for (std::size_t c0 = 0; c0 < cols; c0 += TC) {
    const std::size_t c1 = std::min(cols, c0 + TC);
    for (std::size_t i0 = 0; i0 < rows; i0 += TR) {
      const std::size_t i1 = std::min(rows, i0 + TR);
      if (to_block) {
        for (std::size_t c = c0; c < c1; ++c)
          for (std::size_t i = i0; i < i1; ++i) to[c * rows + i] = from[i * width + first + c];
      } else {
        for (std::size_t i = i0; i < i1; ++i)
          for (std::size_t c = c0; c < c1; ++c) to[i * width + first + c] = from[c * rows + i];
      }
    }
  }
}
template <std::size_t TR, std::size_t TC>
double run(std::size_t rows, std::size_t width) {
  std::size_t cols = std::min<std::size_t>(width / 2, 32768 / rows + 1);  // a piece of ~256 KiB
  std::vector<double> m(rows * width, 1.0), b(rows * cols, 0.0);
  double t = 0;
  int n = 0;
  for (int it = 0; it < 20; ++it) {
    for (bool dir : {true, false}) {
      std::size_t first = (it * 37 * cols) % (width - cols);
      auto s = std::chrono::steady_clock::now();
      if (dir)
        between<TR, TC>(rows, width, first, cols, m.data(), b.data(), true);
      else
        between<TR, TC>(rows, width, first, cols, b.data(), m.data(), false);
      t += std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
      n++;
    }
  }
  return rows * cols * 8.0 * n / t / 1e9;
}
int main() {
  std::size_t shapes[][2] = {{2048, 2048}, {437, 4145},  {4145, 437},  {1000, 1000},
                             {2000, 3000}, {4096, 4096}, {1024, 1024}, {3000, 4096},
                             {512, 8192},  {8192, 512},  {130, 600}};
  double tot[6] = {0};
  for (auto& s : shapes) {
    double r[6] = {run<64, 64>(s[0], s[1]), run<32, 32>(s[0], s[1]), run<16, 64>(s[0], s[1]),
                   run<8, 64>(s[0], s[1]),  run<32, 64>(s[0], s[1]), run<16, 32>(s[0], s[1])};
    std::printf(
        "%5zux%5zu  64x64 %.2f  32x32 %.2f  16x64 %.2f  8x64 %.2f  32x64 %.2f 16x32 %.2f GB/s\n",
        s[0], s[1], r[0], r[1], r[2], r[3], r[4], r[5]);
    for (int i = 0; i < 6; i++) tot[i] += std::log(r[i]);
  }
  for (int i = 0; i < 6; i++) std::printf("%.2f ", std::exp(tot[i] / 11));
  std::printf(" geomean\n");
}

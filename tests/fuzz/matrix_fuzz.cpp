// The matrix readers (--a, --b): .csv, .txt and .bin, chosen by the input's first byte.
#include "distmm/matrix_io.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const char* const names[] = {"m.csv", "m.txt", "m.bin"};
  const auto path = distmm::fuzz::scratch() / names[data[0] % 3];
  distmm::fuzz::write_bytes(path, data + 1, size - 1);
  distmm::fuzz::expect_value_or_input_error([&] {
    const arma::mat x = distmm::load_matrix(path.string(), "--a");
    if (!x.is_finite()) std::abort();  // the reader refuses what is not finite
  });
  return 0;
}

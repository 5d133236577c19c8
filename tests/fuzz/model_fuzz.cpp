// The machine model reader (--model): a JSON file.
#include "distmm/model.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = distmm::fuzz::scratch() / "model.json";
  distmm::fuzz::write_bytes(path, data, size);
  distmm::fuzz::expect_value_or_input_error([&] { (void)distmm::load_model(path); });
  return 0;
}

// The checkpoint reader (train --resume): its manifest, or one of its shard files under a
// manifest that describes it, chosen by the input's first byte; opened and loaded by one
// simulated rank as a resuming run of the seed's problem (16 x 4 x 6, f64, SGD) would.
#include <array>
#include <string>

#include "distmm/checkpoint.hpp"
#include "distmm/simulator.hpp"
#include "fuzz_common.hpp"

namespace {

// The manifest of a 2-shard checkpoint, with the first shard's size and CRC-32 to fill in.
std::string manifest(std::uint64_t bytes, std::uint32_t crc) {
  return R"({"byte_order": "little", "dtype": "f64", "format": "distmm-checkpoint", "k": 4,
  "m": 16, "n": 6, "optimizer": {"beta1": 0.9, "beta2": 0.999, "eps": 1e-08, "lr": 0.1,
  "name": "sgd"}, "ranks": 2, "sections": ["W"], "shards": [
  {"bytes": )" +
         std::to_string(bytes) + R"(, "columns": 3, "crc32": )" + std::to_string(crc) +
         R"(, "file": "shard-00000.bin", "first_column": 0},
  {"bytes": 96, "columns": 3, "crc32": 3136578990, "file": "shard-00001.bin", "first_column": 3}],
  "step": 2, "strategy": "fsdp", "t_crc32": 1403023494, "version": 1, "w0_crc32": 2348746994,
  "x_crc32": 715334378})";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  namespace fs = std::filesystem;
  const fs::path dir = distmm::fuzz::scratch() / "ck" / "step-2";
  fs::create_directories(dir);
  const std::array<std::uint8_t, 96> zeros{};  // CRC-32 3136578990
  distmm::fuzz::write_bytes(dir / "shard-00001.bin", zeros.data(), zeros.size());
  if (data[0] % 2 == 0) {  // the manifest
    distmm::fuzz::write_bytes(dir / "manifest.json", data + 1, size - 1);
    distmm::fuzz::write_bytes(dir / "shard-00000.bin", zeros.data(), zeros.size());
  } else {  // the first shard, described by the manifest
    distmm::fuzz::write_bytes(dir / "shard-00000.bin", data + 1, size - 1);
    const std::string m = manifest(size - 1, distmm::crc32_of(data + 1, size - 1));
    distmm::fuzz::write_bytes(dir / "manifest.json",
                              reinterpret_cast<const std::uint8_t*>(m.data()), m.size());
  }
  distmm::CheckpointMeta expected;
  expected.shape = {16, 4, 6};
  expected.lr = 0.1, expected.beta1 = 0.9, expected.beta2 = 0.999, expected.eps = 1e-8;
  expected.x_crc32 = 715334378, expected.t_crc32 = 1403023494, expected.w0_crc32 = 2348746994;
  distmm::fuzz::expect_value_or_input_error([&] {
    distmm::run_simulated(1, [&](distmm::Communicator& comm) {
      const distmm::Checkpoint c = distmm::open_checkpoint(comm, dir, expected);
      arma::mat w(4, 6);
      double* const sections[] = {w.memptr()};
      distmm::load_columns<double>(comm, c, {0, 6}, sections);
    });
  });
  return 0;
}

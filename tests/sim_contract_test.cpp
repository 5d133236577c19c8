// The Communicator contract on the simulator backend, at world sizes 1..8 and 64.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "contract/contract_cases.hpp"
#include "distmm/memory.hpp"
#include "distmm/simulator.hpp"
#include "strategy/strategy_cases.hpp"

namespace distmm::testing {
namespace {

using Param = std::tuple<ContractCase, int>;

class SimContract : public ::testing::TestWithParam<Param> {};

TEST_P(SimContract, HoldsOnEveryRank) {
  const auto& [c, ranks] = GetParam();
  run_simulated(ranks, c.run);
}

TEST_P(SimContract, HoldsOnSubcommunicators) {
  const ContractCase& c = std::get<0>(GetParam());
  run_simulated(std::get<1>(GetParam()),
                [&](Communicator& comm) { run_on_subcommunicators(comm, c); });
}

// An all-reduce takes no fresh memory, not even its first call: each rank sums its shard of
// the vector into its own buffer and copies it into the others'. A scratch vector of the whole
// size had been allocated (and zeroed, on one thread) by a process's first all-reduce of that
// size: tp-col's first training step with --ranks 4, 16384 x 512 x 256, spent 175 ms in its
// 64 MiB all-reduce against 18-22 ms in later steps. Per call on a rank's thread it came from
// that thread's arena, mapped anew on every call (over 64 MiB): calibrate had read a 64 MiB
// all-reduce with --ranks 2 at 0.18 s (its 16 MiB one at 2.9 ms).
TEST(SimAllreduce, TakesNoFreshMemory) {
  run_simulated(2, [](Communicator& comm) {
    // Beyond glibc's largest arena block (64 MiB); under the sanitizers, which check only the
    // sums, 1 MiB (72 MiB took 10 s under ThreadSanitizer, most of it first touches).
    const std::size_t bytes = kSanitizer ? std::size_t{1} << 20 : std::size_t{72} << 20;
    std::vector<double> v(bytes / sizeof(double), 1.0);
    for (int call = 0; call < 3; ++call) {
      comm.barrier();
      const std::uint64_t before = minor_page_faults(false);
      comm.allreduce_sum(v);
      comm.barrier();
      const std::uint64_t faults = minor_page_faults(false) - before;
      // The sanitizers' allocators keep memory their own way (ASan quarantines freed blocks):
      // only builds without them check the bound.
      if (comm.rank() == 0 && !kSanitizer) {
        EXPECT_LE(faults, 1000u) << "call " << call << " (72 MiB: 18432 pages)";
      }
    }
    EXPECT_EQ(v.front(), 8.0);
    EXPECT_EQ(v.back(), 8.0);
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, SimContract,
                         ::testing::Combine(::testing::ValuesIn(contract_cases().begin(),
                                                                contract_cases().end()),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 64)),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return std::string(std::get<0>(p.param).name) + "_" +
                                  std::to_string(std::get<1>(p.param)) + "ranks";
                         });

}  // namespace
}  // namespace distmm::testing

// Google Benchmark: the simulator's point-to-point bandwidth (2 ranks, rank 0 sends, rank 1
// receives; each message is copied once, straight from sender to receiver) next to memcpy of
// the same size, in the same run. bytes_per_second is the payload rate.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "distmm/simulator.hpp"

namespace {

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> from(bytes, 1), to(bytes, 0);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

void BM_SimulatorSendRecv(benchmark::State& state) {
  const auto elements = static_cast<std::size_t>(state.range(0)) / sizeof(double);
  // Rank 0 runs on this (the benchmark's) thread; a 1-element control message tells rank 1
  // whether another payload follows.
  distmm::run_simulated(2, [&](distmm::Communicator& comm) {
    std::vector<double> payload(elements, 1.0), control(1);
    if (comm.rank() == 0) {
      for (auto _ : state) {
        control[0] = 1;
        comm.send(control, 1, 0);
        comm.send(payload, 1, 1);
      }
      control[0] = 0;
      comm.send(control, 1, 0);
    } else {
      while (true) {
        comm.recv(control, 0, 0);
        if (control[0] == 0) break;
        comm.recv(payload, 0, 1);
      }
    }
  });
  state.SetBytesProcessed(state.iterations() *
                          static_cast<std::int64_t>(elements * sizeof(double)));
}

}  // namespace

BENCHMARK(BM_Memcpy)->Arg(64 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK(BM_SimulatorSendRecv)->Arg(64 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK_MAIN();

#pragma once
// The distmm program as a library: every command and flag of `distmm` (matmul, train,
// calibrate, --dry-run, --model, --report, --trace, ...), run over the strategies in the
// registry (strategy.hpp). A program that registers a strategy of its own and then calls
// run_program() gives it everything the built-in strategies have: verification against
// A * B, the counters, the table, the JSON report, the trace, the dry run and the time
// model's prediction (examples/custom_strategy.cpp). Link distmm::program.
namespace distmm {

// Runs the program on `argv` as `distmm` would (under mpirun: one rank per process; with
// --ranks N: N threads of the simulator) and returns its exit code (0 success, 1
// verification failed, 2 bad input, 3 run failed). Call it once, from main().
int run_program(int argc, char** argv);

}  // namespace distmm

#pragma once
// DP and FSDP against single-process A * B, written once and run on every backend.
#include <armadillo>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "distmm/communicator.hpp"
#include "distmm/model.hpp"
#include "distmm/strategy.hpp"

namespace distmm::testing {

// Sanitizer runtimes manage memory of their own (TSan's per-thread traces, ASan's quarantine
// of freed blocks and shadow memory): under them page faults do not measure our allocations.
#ifdef DISTMM_SANITIZED
inline constexpr bool kSanitizer = true;
#else
inline constexpr bool kSanitizer = false;
#endif

struct StrategyCase {
  const char* name;
  void (*run)(Communicator& comm, const Strategy& strategy);
};

std::span<const StrategyCase> strategy_cases();

// hsdp on every mesh R x S of the communicator's ranks (every R dividing them): C exact against
// A * B, the counters and the memory the plan allocates equal the formulas (formulas.hpp).
void hsdp_every_mesh(Communicator& comm);

// Each of this rank's recorded events equals the planned one (model.hpp's planned_events()).
void expect_planned_events(Communicator& comm, const std::vector<TraceEvent>& real,
                           const PlannedRun& planned, const std::string& what);

inline void PrintTo(const StrategyCase& c, std::ostream* os) {
  *os << c.name;
}

// Every registered strategy, for gtest's parameters (which must be copyable).
inline std::vector<const Strategy*> strategy_pointers() {
  std::vector<const Strategy*> out;
  for (const Strategy& s : all_strategies()) out.push_back(&s);
  return out;
}

// hsdp's settings for a mesh of `replicas` replica groups.
inline StrategySettings mesh(int replicas) {
  return {{"replicas", std::to_string(replicas)}};
}

// The strategy's name as a gtest name ("fsdp-overlap" -> "fsdp_overlap").
inline std::string test_name(const Strategy& s) {
  std::string name(s.name());
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// Integer-valued m x n matrix with entries in [-9, 9], reproducible from `seed`; products of
// such matrices are exact in double and (for small k) in float.
template <typename T>
arma::Mat<T> integer_matrix(std::size_t rows, std::size_t cols, unsigned seed);

// Runs `strategy` on A and B (given on rank 0) and checks C on rank 0 against A * B: exactly
// when `exact`, else within the relative tolerance of T.
template <typename T>
void expect_matches_single_process(Communicator& comm, const Strategy& strategy,
                                   const arma::Mat<T>& a, const arma::Mat<T>& b, bool exact);

}  // namespace distmm::testing

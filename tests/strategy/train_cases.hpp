#pragma once
// Distributed SGD of a linear layer against single-process SGD, on every backend.
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <armadillo>
#include <cstddef>

#include "distmm/communicator.hpp"
#include "distmm/strategy.hpp"

namespace distmm::testing {

// A noisy linear problem with a known W*; W0 random so the first steps are not trivial.
// (Its own generator, not Armadillo's: simulated ranks are threads, and each must draw the
// same data.)
struct TrainData {
  arma::mat x, t, w0;
};
TrainData train_problem(std::size_t m, std::size_t k, std::size_t n, unsigned seed);

// A training strategy as a test runs it: hsdp with its mesh's replicas R.
struct TrainSetup {
  const Strategy& strategy;
  int replicas = 1;
  // Its settings: hsdp's mesh.
  StrategySettings settings() const {
    return strategy.options().empty() ? StrategySettings{}
                                      : StrategySettings{{"replicas", std::to_string(replicas)}};
  }
};
std::string name_of(const TrainSetup& s);
// Every training strategy on `ranks` ranks: hsdp once per R dividing the ranks.
std::vector<TrainSetup> train_setups(int ranks);

struct TrainCase {
  const char* name;
  void (*run)(Communicator& comm);
};

std::span<const TrainCase> train_cases();

inline void PrintTo(const TrainCase& c, std::ostream* os) {
  *os << c.name;
}

}  // namespace distmm::testing

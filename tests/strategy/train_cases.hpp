#pragma once
// Distributed SGD of a linear layer against single-process SGD, on every backend.
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <armadillo>
#include <cstddef>
#include <optional>

#include "distmm/communicator.hpp"
#include "distmm/strategies/grid.hpp"
#include "distmm/strategy.hpp"
#include "distmm/train.hpp"

namespace distmm::testing {

// A noisy linear problem with a known W*; W0 random so the first steps are not trivial.
// (Its own generator, not Armadillo's: simulated ranks are threads, and each must draw the
// same data.)
struct TrainData {
  arma::mat x, t, w0;
};
TrainData train_problem(std::size_t m, std::size_t k, std::size_t n, unsigned seed);

// A training strategy as a test runs it: hsdp with its mesh's replicas R, grid with its grid.
struct TrainSetup {
  const Strategy& strategy;
  int replicas = 1;
  std::optional<Grid> grid;
  // Its settings: hsdp's mesh, the grid.
  StrategySettings settings() const;
};
std::string name_of(const TrainSetup& s);
// Every training strategy on `ranks` ranks: hsdp once per R dividing the ranks, grid on every
// PM x PN of the ranks and on one with a rank idle.
std::vector<TrainSetup> train_setups(int ranks);
bool same_setup(const TrainSetup& a, const TrainSetup& b);

// What rank `rank` of `setup` sends, receives and holds per training step, and the block of W
// it saves in a checkpoint (and reads when resuming): formulas.hpp's.
TrainStepFigures expected_train_figures(const TrainSetup& setup, const MatmulShape& shape,
                                        int ranks, int rank, std::size_t element_bytes,
                                        Optimizer optimizer);
Block expected_checkpoint_block(const TrainSetup& setup, const MatmulShape& shape, int ranks,
                                int rank);

struct TrainCase {
  const char* name;
  void (*run)(Communicator& comm);
};

std::span<const TrainCase> train_cases();

inline void PrintTo(const TrainCase& c, std::ostream* os) {
  *os << c.name;
}

}  // namespace distmm::testing

#pragma once
// A strategy's run as the model replays it: a list of steps, each one event per rank (or none
// for a rank outside the step's collective), generated on demand so that thousands of ranks
// cost no memory per rank and event.
#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "distmm/model.hpp"

namespace distmm::model {

struct Program {
  std::vector<std::vector<int>> groups;  // world ranks of each communicator (0: all)
  std::vector<std::function<std::optional<PlannedEvent>(int rank)>> steps;
  std::size_t setup_steps = 0;                // the first steps place the parameters
  std::vector<std::size_t> execution_starts;  // the step each execution (train: step) begins at
};

Program program(Strategy strategy, const MatmulShape& shape, int ranks, std::size_t element_bytes,
                int replicas, std::size_t executions, bool train);

}  // namespace distmm::model

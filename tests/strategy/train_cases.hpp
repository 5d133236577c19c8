#pragma once
// Distributed SGD of a linear layer against single-process SGD, on every backend.
#include <ostream>
#include <span>

#include "distmm/communicator.hpp"

namespace distmm::testing {

struct TrainCase {
  const char* name;
  void (*run)(Communicator& comm);
};

std::span<const TrainCase> train_cases();

inline void PrintTo(const TrainCase& c, std::ostream* os) {
  *os << c.name;
}

}  // namespace distmm::testing

#pragma once
// The Communicator contract suite, written once and run against every backend: each case is
// a function every rank calls with its own communicator, checking with gtest's EXPECT_*.
#include <ostream>
#include <span>
#include <string>

#include "distmm/communicator.hpp"

namespace distmm::testing {

struct ContractCase {
  const char* name;
  void (*run)(Communicator& comm);
};

std::span<const ContractCase> contract_cases();

// Runs a case on sub-communicators of `world`: split into even and odd ranks (in reverse
// order, both groups at once), then into groups of one rank. Collective over `world`.
void run_on_subcommunicators(Communicator& world, const ContractCase& c);

inline void PrintTo(const ContractCase& c, std::ostream* os) {
  *os << c.name;
}

}  // namespace distmm::testing

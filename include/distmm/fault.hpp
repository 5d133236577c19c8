#pragma once
// Fault injection, for tests and for teaching: the same plan works on every backend.
//
//   crash:R[:N]      rank R fails (throws InjectedFault) at its N-th communication call
//                    (default 1: its first)
//   skip:R           rank R silently skips its first collective (the others wait for it)
//   delay:MS[:SEED]  every communication call is held back a random 0..MS milliseconds
#include <cstdint>
#include <optional>
#include <string>

#include "distmm/error.hpp"

namespace distmm {

struct FaultPlan {
  enum class Kind { none, crash, skip, delay };
  Kind kind = Kind::none;
  int rank = -1;           // crash, skip
  std::uint64_t call = 1;  // crash: at this rank's call number `call` (1 = the first)
  int delay_ms = 0;        // delay
  std::uint64_t seed = 1;  // delay
  std::string spec;        // as given, for messages
};

// Parses a --fault SPEC; throws InputError naming --fault on a malformed one.
FaultPlan parse_fault(const std::string& spec);

class InjectedFault : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace distmm

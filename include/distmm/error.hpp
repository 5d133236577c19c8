#pragma once
// One exception tree for everything distmm throws.
//
//   Error                 base: carries the rank (or -1 outside a rank) and the operation
//   ├── InputError        bad usage or input (program exit code 2)
//   ├── CommError         a communication call failed on this rank (exit 3)
//   │   ├── PeerFailure   another rank failed; this rank was released from its wait
//   │   ├── DeadlockError the simulator proved that no blocked rank can progress
//   │   ├── MismatchError ranks disagree about a collective (operation, root, counts)
//   │   └── TimeoutError  a wait exceeded the configured bound (MPI backend)
//   └── VerificationError the result differs from single-process A * B (exit 1)
#include <stdexcept>
#include <string>

namespace distmm {

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, int rank = -1, std::string operation = {})
      : std::runtime_error(what), rank_(rank), operation_(std::move(operation)) {}
  // The rank on which the error arose, or -1 when it arose outside any rank.
  int rank() const noexcept { return rank_; }
  // The communication call or program step that failed, e.g. "scatterv".
  const std::string& operation() const noexcept { return operation_; }

 private:
  int rank_;
  std::string operation_;
};

class InputError : public Error {
 public:
  using Error::Error;
};

class CommError : public Error {
 public:
  using Error::Error;
};

class PeerFailure : public CommError {
 public:
  using CommError::CommError;
};

class DeadlockError : public CommError {
 public:
  using CommError::CommError;
};

class MismatchError : public CommError {
 public:
  using CommError::CommError;
};

class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

class VerificationError : public Error {
 public:
  using Error::Error;
};

}  // namespace distmm

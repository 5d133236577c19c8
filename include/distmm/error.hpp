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
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace distmm {

// Text from input (a value, a file name, a field) as an error message may show it: control
// characters and invalid UTF-8 escaped (\n, \x1b, \xNN), and cut after `most` printed
// characters (an escape's all of its) with "…" (valid UTF-8 beyond ASCII stays as it is). A file's
// bytes then cannot break the message's one line or drive the terminal it is printed on.
std::string escaped(std::string_view text, std::size_t most = 48);
// The same between single quotes: 'value'.
std::string quote(std::string_view text, std::size_t most = 48);
// A path as escaped() shows text, cut in its middle when longer than `most` (its start and
// the file's name stay).
std::string escaped_path(std::string_view path, std::size_t most = 100);
// A whole message made one printable line of at most `most` characters (the last guard before
// printing: what a message quotes is already quote()).
std::string printable(std::string_view message, std::size_t most = 400);

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

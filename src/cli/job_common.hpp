#pragma once
// What the matmul and train jobs share: input checks, telling every rank the shape, and
// writing the output files.
#include <functional>
#include <iosfwd>
#include <optional>

#include "cli/options.hpp"
#include "distmm/communicator.hpp"
#include "distmm/shape.hpp"

namespace distmm::cli {

inline constexpr int kRoot = 0;

// Checks that --out (a matrix file), --report and --trace can be written, before any work.
void check_output_files(const Options& options);

// Rank 0 calls load(), which may throw InputError; one broadcast then tells every rank the
// problem's shape, or that the input was bad (rank 0 prints the message on `err`). Returns
// nothing, on every rank, for bad input.
std::optional<MatmulShape> share_shape(Communicator& comm, std::ostream& err,
                                       const std::function<MatmulShape()>& load);

// Rank 0 writes its files through write(); a file that cannot be written is reported on
// `err` and gives kRunFailed, else kSuccess.
int write_outputs(std::ostream& err, const std::function<void()>& write);

}  // namespace distmm::cli

#include "cli/job_common.hpp"

#include <ostream>
#include <vector>

#include "distmm/error.hpp"
#include "distmm/matrix_io.hpp"

namespace distmm::cli {

void check_output_files(const Options& o) {
  if (!o.out_file.empty()) check_output_path(o.out_file, "--out");
  if (!o.report_file.empty()) check_writable(o.report_file, "--report");
  if (!o.trace_file.empty()) check_writable(o.trace_file, "--trace");
}

std::optional<MatmulShape> share_shape(Communicator& comm, std::ostream& err,
                                       const std::function<MatmulShape()>& load) {
  std::vector<double> header{0, 0, 0, 0};  // status, m, k, n
  if (comm.rank() == kRoot) {
    try {
      const MatmulShape s = load();
      header = {0, static_cast<double>(s.m), static_cast<double>(s.k), static_cast<double>(s.n)};
    } catch (const InputError& e) {
      err << "distmm: error: " << e.what() << std::endl;
      header[0] = kBadInput;
    }
  }
  comm.broadcast(header, kRoot);
  if (header[0] != 0) return std::nullopt;
  return MatmulShape{static_cast<std::size_t>(header[1]), static_cast<std::size_t>(header[2]),
                     static_cast<std::size_t>(header[3])};
}

int write_outputs(std::ostream& err, const std::function<void()>& write) {
  try {
    write();
  } catch (const InputError& e) {
    err << "distmm: error: " << e.what() << std::endl;
    return kRunFailed;
  }
  return kSuccess;
}

}  // namespace distmm::cli

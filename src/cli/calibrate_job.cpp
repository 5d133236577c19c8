#include "cli/calibrate_job.hpp"

#include <chrono>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/job_common.hpp"
#include "distmm/calibration.hpp"
#include "distmm/matrix_io.hpp"
#include "distmm/model.hpp"

namespace distmm::cli {

int run_calibrate_job(Communicator& comm, const Options& options, std::ostream& out,
                      std::ostream& err) {
  const bool root = comm.rank() == kRoot;
  const auto started = std::chrono::steady_clock::now();
  const auto progress = [&](const std::string& line) {
    if (root) err << "distmm calibrate: " << line << std::endl;
  };
  const MachineModel model =
      calibrate(comm, CalibrationOptions{.quick = options.calibrate_quick}, progress);
  comm.stats().reset();
  int code = kSuccess;
  if (root) {
    const std::string text = model_json(model);
    if (options.out_file.empty()) {
      out << text << std::flush;
    } else {
      code = write_outputs(err, [&] { save_text(text, options.out_file, "--out"); });
    }
    std::ostringstream line;
    line.precision(3);
    line << "done in "
         << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
         << " s" << (options.out_file.empty() ? "" : ": " + options.out_file);
    progress(line.str());
  }
  std::vector<double> agreed{static_cast<double>(code)};
  comm.broadcast(agreed, kRoot);
  return static_cast<int>(agreed[0]);
}

}  // namespace distmm::cli

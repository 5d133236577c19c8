#pragma once
// Calibration: measures the machine model (model.hpp) on the machine it runs on, through the
// Communicator: ping-pong sweeps on one host and across hosts, every collective over sizes,
// gemm curves, first touch and first use of memory, copy and reduction rates, stragglers.
// `distmm calibrate` runs it and writes the model; a program may run it itself.
#include <functional>
#include <string>

#include "distmm/communicator.hpp"
#include "distmm/model.hpp"

namespace distmm {

struct CalibrationOptions {
  bool quick = false;  // fewer and smaller sizes (about half the time)
};

// Collective over `comm` (at least 2 ranks, else InputError). Rank 0 gets the model (the
// other ranks a partial one) and calls `progress` with one line per phase. Takes about 30 to
// 90 s.
MachineModel calibrate(Communicator& comm, const CalibrationOptions& options,
                       const std::function<void(const std::string&)>& progress = {});

}  // namespace distmm

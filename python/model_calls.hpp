#pragma once
// The module's calls on the time model: predict() and choose() (--strategy auto).
#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>

namespace distmm::python {

namespace py = pybind11;

// The time model's prediction of one strategy: setup, cold and warm seconds, per rank's comm
// and compute.
py::dict predict(const std::string& name, std::size_t m, std::size_t k, std::size_t n, int ranks,
                 const std::string& model_file, int ranks_per_host, int blas_threads,
                 const std::string& dtype, bool train, const py::dict& options);

// --strategy auto's ranking (choose.hpp): the pick and every candidate.
py::dict choose(std::size_t m, std::size_t k, std::size_t n, int ranks,
                const std::string& model_file, int ranks_per_host, int blas_threads,
                const std::string& dtype, bool train, const py::object& memory, bool distributed,
                std::size_t warmup, std::size_t repeat, std::size_t steps, const py::dict& options);

}  // namespace distmm::python
